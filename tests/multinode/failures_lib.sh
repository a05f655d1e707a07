# Shared by tests/multinode/test_*.sh (issue 14 items 3 and 4: a node dies, the network splits).
# Sources the cluster helper's tests/cluster/lib.sh (HT_CLUSTER_LIB overrides its path), which re-runs
# the calling test inside a fresh simulated cluster and exits 77 where none can be built.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cluster_lib=${HT_CLUSTER_LIB:-$here/../cluster/lib.sh}
[[ -f $cluster_lib ]] || { echo "SKIP: no simulated cluster ($cluster_lib missing)" >&2; exit 77; }
# shellcheck source=../cluster/lib.sh
source "$cluster_lib"
# shellcheck source=../cluster/cluster.sh
source "$(dirname "$cluster_lib")/cluster.sh"

TIMEOUT_S=${TIMEOUT_S:-10}  # dist.timeout_s of the runs
GRACE_S=10                  # the grace docs/exit_codes.md states
SLACK_S=3                   # polling and a loaded 2-core machine

# long_run RUN_DIR HOSTS LOG [FLAGS...]: starts a long synthetic run (4 ranks) in the background; sets
# MPIRUN_PID. Each rank's stderr goes straight to RUN_DIR.rankR.err (shared directory): a job that
# mpirun aborts, or a node cut off from it, loses what is forwarded through mpirun.
long_run() {
  local dir=$1 hosts=$2 log=$3
  shift 3
  # shellcheck disable=SC2046,SC2016
  mpirun --bind-to none --host "$hosts" -x HT_ERR_PREFIX="$dir" \
    bash -c 'exec "$0" "$@" 2>"$HT_ERR_PREFIX.rank$OMPI_COMM_WORLD_RANK.err"' "$HT_BIN" train \
    $(ht_small_flags --run.dir "$dir" --data.synthetic_samples 400000 --train.max_steps 100000 \
      --optim.schedule constant --dist.timeout_s "$TIMEOUT_S" --checkpoint.every_steps 20 "$@") >"$log" 2>&1 &
  MPIRUN_PID=$!
}

# steps_logged RUN_DIR: step records in metrics.jsonl so far.
steps_logged() { local n; n=$(grep -c '"event": *"step"' "$1/metrics.jsonl" 2>/dev/null); echo "${n:-0}"; }

# wait_steps RUN_DIR N LIMIT_S: until N steps are logged (fails the test after LIMIT_S).
wait_steps() {
  local t=0
  while (( $(steps_logged "$1") < $2 )); do
    sleep 0.2
    t=$((t + 1))
    (( t < $3 * 5 )) || fail "the run did not reach step $2 in $3 s"
    kill -0 "$MPIRUN_PID" 2>/dev/null || fail "mpirun ended before step $2"
  done
}

# rank_pids NODE: pids of the hpctrain processes in NODE's network namespace.
rank_pids() {
  local p
  for p in $(ht_cluster_pids "$1"); do
    [[ $(cat "/proc/$p/comm" 2>/dev/null) == hpctrain ]] && echo "$p"
  done
}

# wait_gone LIMIT_S PID...: waits until every PID has exited; prints "PID SECONDS" for each as it
# goes (seconds since T0, a global set by the caller with $EPOCHREALTIME); returns 1 if some are left.
wait_gone() {
  local limit=$1 p left
  shift
  declare -A seen=()
  while :; do
    left=0
    for p in "$@"; do
      [[ -n ${seen[$p]:-} ]] && continue
      if [[ -d /proc/$p ]] && [[ $(cat "/proc/$p/stat" 2>/dev/null | awk '{print $3}') != Z ]]; then
        left=1
      else
        seen[$p]=1
        echo "$p $(elapsed)"
      fi
    done
    (( left == 0 )) && return 0
    awk -v e="$(elapsed)" -v l="$limit" 'BEGIN { exit !(e > l) }' && return 1
    sleep 0.1
  done
}

elapsed() { awk -v a="$EPOCHREALTIME" -v b="$T0" 'BEGIN { printf "%.1f", a - b }'; }

# signal_node2_ranks RUN_DIR SIG WHAT NOTE PID...: sends SIG to node2's ranks (p2, rank_pids_2x2) at T0,
# sets limit (dist.timeout_s + the stated grace + slack) and gone (wait_gone's lines for each PID), and
# prints "node2's ranks WHAT at step N; exits (NOTE): ..."; returns 1 if some PID is still running.
signal_node2_ranks() {
  local dir=$1 sig=$2 what=$3 note=$4 ok
  shift 4
  T0=$EPOCHREALTIME
  kill -"$sig" "${p2[@]}"
  limit=$((TIMEOUT_S + GRACE_S + SLACK_S))
  gone=$(wait_gone "$limit" "$@")
  ok=$?
  echo "node2's ranks $what at step $(steps_logged "$dir"); exits ($note): $(echo "$gone" | tr '\n' ' ')"
  return "$ok"
}

# rank_log DIR R: rank R's stderr (long_run).
rank_log() { cat "$1.rank$2.err" 2>/dev/null; }

# stop_mpirun: ends mpirun (TERM twice: its "abort in progress, hit ctrl-c again"; then KILL).
stop_mpirun() {
  local i
  for sig in TERM TERM KILL; do
    kill -0 "$MPIRUN_PID" 2>/dev/null || return 0
    kill -"$sig" "$MPIRUN_PID" 2>/dev/null
    for i in $(seq 30); do kill -0 "$MPIRUN_PID" 2>/dev/null || return 0; sleep 0.1; done
  done
}

# leftover NODE: processes in NODE's namespace other than the cluster's own (holder, head shell).
leftover() {
  local p holder
  holder=$(ht_cluster_pid "$1")
  for p in $(ht_cluster_pids "$1"); do
    [[ $p == "$holder" ]] && continue
    case $(cat "/proc/$p/comm" 2>/dev/null) in
      hpctrain|orted|mpirun|node_rsh.sh) echo "$p $(tr '\0' ' ' <"/proc/$p/cmdline" | cut -c1-80)" ;;
    esac
  done
}

# ---- Under Slurm (tests/multinode/test_*_srun.sh: the same failures in an sbatch --nodes=2 job of
# slurm/train.sbatch, srun --mpi=pmix; the cluster started with --slurm).

# srun_long_job RUN_DIR NAME [FLAGS...]: submits the long synthetic run of long_run as a 2 nodes x 2
# tasks train.sbatch job (output NAME.out); sets JOB. Each task's stderr goes straight to
# RUN_DIR.rankR.err (srun --error, written by the slurmstepd of the task's node): what srun forwards
# from a node cut off from it is lost. SRUN_EXTRA_ARGS adds srun options (to try others by hand).
srun_long_job() {
  local dir=$1 name=$2
  shift 2
  # These tests bound a failure's detection and Slurm's own handling of it (the job ended, requeued
  # as NODE_FAIL when a node goes DOWN): no relaunch inside the allocation (HT_MAX_RESTARTS=0,
  # --no-kill=off; tests/cluster/test_restart.sh tests that), no qualification before training.
  # shellcheck disable=SC2046
  JOB=$(HT_MAX_RESTARTS=0 HT_QUALIFY=0 HT_SRUN_ARGS="--error=$dir.rank%t.err ${SRUN_EXTRA_ARGS:-}" \
    sbatch --parsable --no-kill=off --job-name="$name" --nodes=2 \
    --ntasks-per-node=2 --gpus-per-node=2 --time=30 -o "$work/$name.out" "$src/slurm/train.sbatch" \
    $(ht_small_flags --run.dir "$dir" --data.synthetic_samples 400000 --train.max_steps 100000 \
      --optim.schedule constant --dist.timeout_s "$TIMEOUT_S" --checkpoint.every_steps 20 "$@")) ||
    fail "sbatch $name"
  JOB=${JOB%%;*}
}

# job_state JOB: the job's state (RUNNING, FAILED, PENDING, ...; empty once slurmctld forgot it).
job_state() { scontrol show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p' | head -1; }

# job_field JOB KEY: one field of scontrol show job (ExitCode, Restarts, Reason, ...).
job_field() { scontrol show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1; }

# srun_wait_steps RUN_DIR N LIMIT_S: until N steps are logged (fails the test after LIMIT_S, or
# when job JOB is no longer pending or running).
srun_wait_steps() {
  local t=0 st
  while (( $(steps_logged "$1") < $2 )); do
    sleep 0.2
    t=$((t + 1))
    (( t < $3 * 5 )) || fail "job $JOB did not reach step $2 in $3 s (state $(job_state "$JOB"))"
    st=$(job_state "$JOB")
    [[ $st == RUNNING || $st == PENDING || $st == CONFIGURING ]] || fail "job $JOB ended ($st) before step $2"
  done
}

# comm_pids NODE NAME...: pids on NODE whose command name is one of NAME.
comm_pids() {
  local node=$1 p c n
  shift
  for p in $(ht_cluster_pids "$node"); do
    c=$(cat "/proc/$p/comm" 2>/dev/null) || continue
    for n in "$@"; do [[ $c == "$n" ]] && { echo "$p"; break; }; done
  done
}

# slurm_leftover NODE: the job's processes on NODE (ranks, srun, slurmstepd, the batch script), one
# "PID COMMAND" per line; the daemons (slurmd, slurmctld, munged) are the cluster's, not the job's.
slurm_leftover() {
  local p
  for p in $(comm_pids "$1" hpctrain srun slurmstepd slurm_script); do
    echo "$p $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | cut -c1-80)"
  done
}

# kill_leftover NODE...: SIGKILLs the job's processes on each NODE by pid (what Slurm left); prints them.
kill_leftover() {
  local n p
  for n in "$@"; do
    for p in $(comm_pids "$n" hpctrain srun slurmstepd slurm_script); do
      echo "$n: $p $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | cut -c1-60)"
      kill -KILL "$p" 2>/dev/null
    done
  done
}

# same_losses RUN_DIR REF_DIR END: every step 1..END logged in RUN_DIR (its last record per step: a
# rerun repeats the steps after its checkpoint) within 1e-5 relative of REF_DIR's loss.
same_losses() {
  /usr/bin/python3 - "$1" "$2" "$3" <<'PY'
import json, sys
def losses(d):
    return {r["step"]: r["loss"] for r in map(json.loads, open(d + "/metrics.jsonl")) if r["event"] == "step"}
a, b, end = losses(sys.argv[1]), losses(sys.argv[2]), int(sys.argv[3])
assert sorted(a) == list(range(1, end + 1)), f"steps logged: {sorted(a)[:3]}..{sorted(a)[-3:]}"
for s in range(1, end + 1):
    assert abs(a[s] - b[s]) <= 1e-5 * abs(b[s]), f"step {s}: {a[s]} vs {b[s]}"
PY
}

# srun_job_pids: sets p1 and p2 (the hpctrain ranks on node1 and node2, 2 each) and sr (srun on node1)
# of a running 2x2 srun_long_job; fails the test when they are not there.
srun_job_pids() {
  rank_pids_2x2
  mapfile -t sr < <(comm_pids node1 srun)
  (( ${#sr[@]} >= 1 )) || fail "no srun on node1"
}

# rank_pids_2x2: sets p1 and p2, the pids of the ranks on node1 and node2 of a running 4-rank job;
# fails the test unless there are 2 on each.
rank_pids_2x2() {
  mapfile -t p1 < <(rank_pids node1)
  mapfile -t p2 < <(rank_pids node2)
  (( ${#p1[@]} == 2 && ${#p2[@]} == 2 )) || fail "expected 2 ranks per node, found node1: ${p1[*]}, node2: ${p2[*]}"
}
