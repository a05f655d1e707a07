#!/usr/bin/env bash
# Issue 14 item 4 under Slurm: the network splits. `sbatch --nodes=2 slurm/train.sbatch` (srun
# --mpi=pmix, 2 tasks per node, dist.timeout_s = 10); mid-step node2's cable is pulled and left out.
# Required: every rank on both sides exits within dist.timeout_s plus the stated grace (10 s), each
# naming the peers it lost with their host (ranks 0, 1: node2 (ranks 2, 3); ranks 2, 3: node1 (ranks
# 0, 1)); their messages are written by each node's slurmstepd (srun --error), since nothing node2
# forwards reaches srun any more.
# Then Slurm: srun on node1 cannot hear from node2's slurmstepd; it ends at the earlier of two events,
# one per mode of this test (docs/slurm.md), measured second by second and bounded:
#   slurmd (default): the test cluster's SlurmdTimeout=30: slurmctld sets node2 DOWN within
#     SlurmdTimeout + SlurmdTimeout/3 of the split and kills the job as NODE_FAIL, which requeues it
#     (train.sbatch asks for --requeue): srun gone, the job PENDING with Restarts=1, within that + 20 s;
#   wait: SlurmdTimeout=300 (Slurm's default), so train.sbatch's srun --wait=60 ends it: srun gone
#     within dist.timeout_s + 10 + 60 + KillWait + 2 (+ 10) s, the batch script exiting 1, the job not
#     requeued (Restarts=0).
# What is left on each node then is recorded, and the test ends it (scancel, then SIGKILL by pid).
mode=${1:-slurmd}
case $mode in
  slurmd) export HT_SLURMD_TIMEOUT=30 ;;
  wait) export HT_SLURMD_TIMEOUT=300 ;;
  *) echo "usage: $0 [slurmd|wait]" >&2; exit 2 ;;
esac
HT_TEST_CLUSTER_OPTS="--nodes 2 --slurm" HT_TEST_LIMIT_S=${HT_TEST_LIMIT_S:-200}
source "$(dirname "$0")/failures_lib.sh"

conf=$(scontrol show config)
slurmd_timeout=$(sed -n 's/^SlurmdTimeout *= *\([0-9]*\) sec.*/\1/p' <<<"$conf")
kill_wait=$(sed -n 's/^KillWait *= *\([0-9]*\) sec.*/\1/p' <<<"$conf")
# The training step's --wait: --wait="${srun_wait:-60}" (the qualification sets srun_wait).
srun_wait=$(sed -n 's/^ *cmd=(srun .*--wait="${srun_wait:-\([0-9]*\)}".*/\1/p' "$src/slurm/train.sbatch")
[[ $slurmd_timeout == "$HT_SLURMD_TIMEOUT" && -n $kill_wait && -n $srun_wait ]] ||
  fail "SlurmdTimeout '$slurmd_timeout' (wanted $HT_SLURMD_TIMEOUT), KillWait '$kill_wait', train.sbatch's srun --wait '$srun_wait'"
if [[ $mode == slurmd ]]; then
  bound=$((slurmd_timeout + slurmd_timeout / 3 + 20))
else
  bound=$((TIMEOUT_S + GRACE_S + srun_wait + kill_wait + 2 + 10))
fi

d=$work/split
srun_long_job "$d" split
srun_wait_steps "$d" 30 90
srun_job_pids  # p1, p2: the ranks on node1, node2; sr: srun on node1
T0=$EPOCHREALTIME
ht_cluster_link node2 down
limit=$((TIMEOUT_S + GRACE_S + SLACK_S))
gone=$(wait_gone "$limit" "${p1[@]}" "${p2[@]}")
ok=$?
echo "link down at step $(steps_logged "$d"); rank exits (pid seconds): $(echo "$gone" | tr '\n' ' ')"
worst=$(echo "$gone" | awk '{ if ($2 > m) m = $2 } END { print m }')

# What Slurm does, second by second, until srun is gone and the job has left RUNNING (or the bound).
t_srun="" t_job="" t_node="" st0=RUNNING node0=""
while :; do
  now=$(elapsed)
  [[ -z $t_srun ]] && wait_gone 0 "${sr[@]}" >/dev/null && t_srun=$now
  st=$(job_state "$JOB")
  if [[ $st != "$st0" ]]; then echo "  $now s: job $JOB $st (Reason=$(job_field "$JOB" Reason))"; st0=$st; fi
  [[ -z $t_job && $st != RUNNING ]] && t_job=$now
  ns=$(sinfo -h -n node2 -o %T 2>/dev/null)
  if [[ $ns != "$node0" ]]; then echo "  $now s: node2 $ns"; node0=$ns; fi
  [[ -z $t_node && $ns == down* ]] && t_node=$now
  # COMPLETING is on the way out of RUNNING (to PENDING when requeued, FAILED otherwise): wait for the
  # state it settles in, still within the bound (the job was once seen COMPLETING, Restarts=1, at 45.0 s
  # and PENDING a moment later).
  [[ -n $t_srun && -n $t_job && $st != COMPLETING ]] && break
  awk -v e="$now" -v l="$bound" 'BEGIN { exit !(e > l) }' && break
  sleep 0.5
done
echo "srun gone at ${t_srun:-never (within $bound s)} s; job left RUNNING at ${t_job:-never} s (now $st);" \
  "node2 down at ${t_node:-never} s (SlurmdTimeout $slurmd_timeout s)"
left1=$(slurm_leftover node1) left2=$(slurm_leftover node2)
echo "left on node1: ${left1:-nothing}"
echo "left on node2: ${left2:-nothing}"
restarts=$(job_field "$JOB" Restarts)
scancel "$JOB" 2>/dev/null
sleep 1
killed=$(kill_leftover node1 node2)
[[ -n $killed ]] && echo "killed by pid after scancel: $killed"
grep -h "^srun: \|slurmstepd: \|train.sbatch.*exited" "$work/split.out" | sed 's/^/  split.out: /' | tail -n 12

(( ok == 0 )) || fail "ranks still running $limit s after the link went down"
for r in 0 1; do
  grep -q "fatal (rank $r on node1).*lost peers.*node2 (ranks 2, 3)" "$d.rank$r.err" ||
    fail "rank $r does not name node2 (ranks 2, 3) as lost: $(grep -h fatal "$d.rank$r.err")"
done
for r in 2 3; do
  grep -q "fatal (rank $r on node2).*lost peers.*node1 (ranks 0, 1)" "$d.rank$r.err" ||
    fail "rank $r does not name node1 (ranks 0, 1) as lost: $(grep -h fatal "$d.rank$r.err")"
done
[[ -n $t_srun ]] || fail "srun still running $bound s after the split ($mode mode)"
[[ -n $t_job ]] || fail "job $JOB still RUNNING $bound s after the split"
if [[ $mode == slurmd ]]; then
  [[ -n $t_node ]] || fail "node2 not DOWN when srun had gone"
  [[ $st == PENDING && $restarts == 1 ]] || fail "job $JOB $st, Restarts=$restarts: expected requeued after NODE_FAIL (PENDING, 1)"
else
  [[ -z $t_node ]] || fail "node2 DOWN at $t_node s with SlurmdTimeout $slurmd_timeout s"
  grep -q "Timed out waiting for job step to complete" "$work/split.out" || fail "srun did not end by its --wait"
  grep -q "job step exited with [1-9]" "$work/split.out" || fail "train.sbatch did not report a failed job step"
  [[ $restarts == 0 ]] || fail "job $JOB requeued (Restarts=$restarts)"
fi
sleep 1
left="$(slurm_leftover node1)$(slurm_leftover node2)"
[[ -z $left ]] || fail "processes left after scancel and kill: $left"
echo "PASS ($mode): every rank exited within $worst s of the split (limit $TIMEOUT_S + $GRACE_S s), each naming" \
  "the other node's ranks; srun gone at $t_srun s (bound $bound s), the job $st at $t_job s (Restarts=$restarts)," \
  "node2 down at ${t_node:-never} s (SlurmdTimeout $slurmd_timeout s)"
