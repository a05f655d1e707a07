#!/usr/bin/env bash
# Issue 14 item 3 under Slurm: a node dies. `sbatch --nodes=2 slurm/train.sbatch` (srun --mpi=pmix,
# 2 tasks per node; synthetic data, dist.timeout_s = 10, a checkpoint every 20 steps); mid-step every
# hpctrain rank on node2 is SIGKILLed. Required: the survivors on node1 exit within dist.timeout_s plus
# the stated grace (10 s), rank 0 or 1 naming node2 (ranks 2, 3) as lost (the collective guard) and
# srun naming node2's tasks 2-3; srun exits non-zero in that time and the job ends FAILED (not
# requeued: Restarts=0); no hpctrain, srun, slurmstepd or batch script of the job is left on either
# node; the newest checkpoint is intact and a train.sbatch rerun on node1 alone (1 node x 2 tasks, the
# same global batch) resumes from it with the same sample stream: every step loss within 1e-5
# relative of an uninterrupted 2-task run (on node2, at the same time).
HT_TEST_CLUSTER_OPTS="--nodes 2 --slurm" HT_TEST_LIMIT_S=${HT_TEST_LIMIT_S:-240}
source "$(dirname "$0")/failures_lib.sh"

d=$work/dies
srun_long_job "$d" dies
srun_wait_steps "$d" 50 90
srun_job_pids  # p1, p2: the ranks on node1, node2; sr: srun on node1
if ! signal_node2_ranks "$d" KILL killed "pid seconds; ranks 0, 1, then srun" "${p1[@]}" "${sr[@]}"; then
  left=$(kill_leftover node1 node2)
  fail "survivors or srun still running $limit s after node2's ranks died; killed: $left"
fi
st=$(ht_slurm_wait_state "$JOB" '^(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|PENDING|REQUEUED)$' 20)
t_job=$(elapsed)
[[ $st == FAILED ]] || fail "job $JOB ended $st, expected FAILED"
rc=$(sed -n 's/.*job step exited with \([0-9]*\).*/\1/p' "$work/dies.out" | tail -1)
[[ -n $rc && $rc != 0 ]] || fail "train.sbatch's job step exited '${rc:-?}', expected non-zero"
sleep 3  # a requeue would show by now
[[ $(job_state "$JOB") == FAILED && $(job_field "$JOB" Restarts) == 0 ]] ||
  fail "job $JOB requeued after the failure: $(job_state "$JOB"), Restarts=$(job_field "$JOB" Restarts)"
echo "job $JOB $st at $t_job s, ExitCode=$(job_field "$JOB" ExitCode), srun exit $rc"
grep -q "lost peers.*node2 (ranks 2, 3)" "$d.rank0.err" "$d.rank1.err" ||
  fail "neither survivor names node2 (ranks 2, 3) as lost: $(grep -h fatal "$d.rank0.err" "$d.rank1.err")"
grep -q "srun: error: node2: tasks 2-3: Killed" "$work/dies.out" ||
  fail "srun does not name node2's tasks 2-3 as killed"
named=$(grep -h "fatal" "$d.rank0.err" "$d.rank1.err" | sed 's/.*lost peers/lost peers/' | sort -u | head -1)
sleep 1
left="$(slurm_leftover node1)$(slurm_leftover node2)"
[[ -z $left ]] || fail "processes left: $left"

# The newest checkpoint is intact: a 1-node rerun on node1 resumes from it and continues the stream;
# the uninterrupted reference (2 tasks) runs on node2 meanwhile.
latest_file=$(cat "$d/LATEST") || fail "no LATEST in $d"
latest=$(sed -n 's/.*step-0*\([0-9][0-9]*\)\.h5$/\1/p' <<<"$latest_file")
[[ -n $latest ]] || fail "LATEST names '$latest_file'"
"$HT_BIN" inspect "$d/$latest_file" >inspect.log 2>&1 || fail "hpctrain inspect rejects the newest checkpoint $latest_file"
end=$((latest + 30))
one_node() {  # one_node NAME NODE RUN_DIR: a 1 node x 2 tasks train.sbatch job to step $end, waited for
  # shellcheck disable=SC2046
  sbatch --parsable --wait --job-name="$1" --nodes=1 -w "$2" --ntasks-per-node=2 --gpus-per-node=2 --time=30 \
    -o "$work/$1.out" "$src/slurm/train.sbatch" $(ht_small_flags --run.dir "$3" --data.synthetic_samples 400000 \
    --train.max_steps "$end" --optim.schedule constant --dist.timeout_s "$TIMEOUT_S" --checkpoint.every_steps 20) >/dev/null
}
one_node resume node1 "$d" &
resume_pid=$!
one_node ref node2 "$work/ref" || fail "the reference run on node2 failed"
wait "$resume_pid" || fail "the rerun on node1 failed"
grep -q "resumed from .*step $latest,.*saved with world_size 4, now 2" "$work/resume.out" ||
  fail "the rerun did not resume from step $latest"
grep -q "2 tasks on node1 " "$work/resume.out" || fail "the rerun did not run on node1 alone"
same_losses "$d" "$work/ref" "$end" || fail "the resumed run's losses differ from the uninterrupted run"
worst=$(echo "$gone" | awk -v r=" ${p1[*]} " 'index(r, " " $1 " ") { if ($2 > m) m = $2 } END { print m }')
srun_s=$(echo "$gone" | awk -v r=" ${sr[*]} " 'index(r, " " $1 " ") { if ($2 > m) m = $2 } END { print m }')
echo "PASS: survivors gone within $worst s ($named), srun (exit $rc) within $srun_s s," \
  "job FAILED, not requeued; resumed from step $latest on node1 with the same losses to step $end"
