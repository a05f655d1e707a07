#!/usr/bin/env bash
# slurm/train.sbatch's preemption logic on its own, with a test double for the trainer
# (tests/slurm/fake_hpctrain.sh), under both launchers (srun --mpi=pmix, mpirun): USR1 sent to the
# batch shell (as --signal=B:USR1@... does) is forwarded to every rank, the job exits 75 and requeues
# itself, the rerun of the same job id resumes from the run directory, finishes with exit 0, and
# the output file and metrics append across the requeue. Exit 77 when Slurm cannot start.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
source "$here/cluster.sh"
ht_slurm_start || exit $?
work=$HT_SLURM_DIR/work
mkdir -p "$work"
fail() {
  echo "FAIL: $*" >&2
  local f
  for f in "$work"/*.out; do [[ -f $f ]] && { echo "---- $f" >&2; cat "$f" >&2; }; done
  ht_slurm_dump_logs
  exit 1
}

declare -A job
for launcher in srun mpirun; do
  out=$(cd "$work" && HT_BIN=$here/fake_hpctrain.sh HT_LAUNCHER=$launcher HT_CONFIG=/dev/null \
        sbatch --parsable --job-name="req-$launcher" --ntasks-per-node=2 --gpus-per-node=2 \
        "$src/slurm/train.sbatch" --run.dir "$work/run-$launcher" --train.max_steps 25 --run.fresh) ||
    fail "sbatch ($launcher) failed"
  job[$launcher]=${out%%;*}
done

for launcher in srun mpirun; do
  id=${job[$launcher]} run=$work/run-$launcher
  # Wait for a few steps, then send the time-limit warning to the batch shell only.
  for _ in $(seq 1 150); do
    [[ $(grep -c '"step"' "$run/metrics.jsonl" 2>/dev/null) -ge 3 ]] && break
    sleep 0.2
  done
  [[ $(grep -c '"step"' "$run/metrics.jsonl" 2>/dev/null) -ge 3 ]] || fail "$launcher: no progress in $run"
  scancel --batch --signal=USR1 "$id" || fail "scancel --batch --signal=USR1 $id"
done

for launcher in srun mpirun; do
  id=${job[$launcher]}
  st=$(ht_slurm_wait_state "$id" '^PENDING$' 60) || fail "$launcher: job $id not requeued (state $st)"
done
ht_slurm_release_requeued "${job[@]}"

for launcher in srun mpirun; do
  id=${job[$launcher]} run=$work/run-$launcher log=$work/req-$launcher-${job[$launcher]}.out
  st=$(ht_slurm_wait_state "$id" '^(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY)$' 90) ||
    fail "$launcher: job $id did not finish (state $st)"
  info=$(scontrol show job "$id")
  echo "== $launcher job $id: $(grep -o 'JobState=[A-Z]* .*ExitCode=[0-9:]*' <<<"$info" | head -1) $(grep -o 'Restarts=[0-9]*' <<<"$info")"
  echo "---- $log"; cat "$log"
  echo "---- $run/metrics.jsonl"; cat "$run/metrics.jsonl"
  [[ $st == COMPLETED ]] || fail "$launcher: final state $st"
  grep -q 'Restarts=1' <<<"$info" || fail "$launcher: expected Restarts=1"
  [[ $(grep -c '"run_start"' "$run/metrics.jsonl") == 2 ]] || fail "$launcher: expected two run_start lines"
  grep -q '"exit_code":75' "$run/metrics.jsonl" || fail "$launcher: no rank stopped with 75"
  tail -1 "$run/metrics.jsonl" | grep -q '"status":"finished"' || fail "$launcher: did not finish"
  [[ $(grep -c '"event":"step","step":25}' "$run/metrics.jsonl") == 1 ]] || fail "$launcher: final step missing or repeated"
  ckpt=$(cat "$run/LATEST")
  grep -q "\"resume_step\":$ckpt" "$run/metrics.jsonl" || fail "$launcher: rerun did not resume at step $ckpt"
  # One log file with both runs: the restart banner of each, the forwarded signal, the requeue.
  grep -q 'restart 0:' "$log" && grep -q 'restart 1:' "$log" || fail "$launcher: log did not append across the requeue"
  grep -q 'received SIGUSR1' "$log" || fail "$launcher: USR1 not seen by the batch shell"
  grep -q 'requeueing job' "$log" || fail "$launcher: no self-requeue"
  # --run.fresh is dropped on the rerun, so it resumed instead of starting over.
  grep 'restart 1:' -A1 "$log" | grep -q -- '--run.fresh' && fail "$launcher: --run.fresh passed to the rerun"
done
echo "PASS"
