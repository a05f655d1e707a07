#!/usr/bin/env bash
# Issue 27: restart inside the allocation (slurm/train.sbatch, docs/slurm.md#restarts) on the simulated
# cluster with Slurm, one failure per mode, each job bounded in time by this test:
#   spare    4 nodes allocated, 3 train, 1 spare (HT_SPARE_NODES=1); mid-run node3 dies (every process
#            on it, slurmd included). Training goes on with node4 in its place, in the same job (no
#            requeue), and the final checkpoint's parameters and momentum are bitwise those of an
#            uninterrupted 3-node run; the restart is a metrics.jsonl event and `hpctrain report` shows it.
#   spare_mpirun  the same with HT_LAUNCHER=mpirun (Open MPI inside the allocation).
#   elastic  3 nodes, no spare: node3 dies; training goes on on node1 and node2 (world size 3 -> 2, the
#            same global batch and sample stream): every later loss within 1e-5 relative of the
#            uninterrupted run, the learning rate identical.
#   repeat   2 nodes: a deterministic failure (the fail_at_step test fault, rank 1) at step 30 on every launch:
#            2 restarts (HT_MAX_RESTARTS=2), then the job stops with exit 1 and a message naming the
#            repeated step, not a loop.
#   qualify  3 nodes, 2 train + 1 spare, node2's processes throttled to about 10 % of a CPU (stopped
#            90 ms of every 100, as a CFS quota does): qualification names node2 and the spare
#            replaces it. Then 2 nodes without a spare, node2 throttled: the run starts on both, with
#            a warning, and the watchdog names node2 as the slow rank's host. Then the slow-rank policy
#            (watchdog.slow_rank_stop_windows) without qualification: exit 4 naming node2, and the
#            relaunch puts the spare in its place.
mode=${1:-spare}
case $mode in
  spare|spare_mpirun) nodes=4 ;;
  elastic|qualify) nodes=3 ;;
  repeat) nodes=2 ;;
  *) echo "usage: $0 spare|spare_mpirun|elastic|repeat|qualify" >&2; exit 2 ;;
esac
HT_TEST_CLUSTER_OPTS="--nodes $nodes --slurm" HT_TEST_LIMIT_S=${HT_TEST_LIMIT_S:-280}
source "$(dirname "$0")/lib.sh"
# shellcheck source=cluster.sh
source "$src/tests/cluster/cluster.sh"

TIMEOUT_S=10  # dist.timeout_s: a lost node is named within about this
flags() {  # flags RUN_DIR [--key value ...]: a 3-node-divisible synthetic run, 120 steps
  ht_small_flags --run.dir "$1" --train.global_batch 48 --train.max_steps 120 --checkpoint.every_steps 20 \
    --dist.timeout_s "$TIMEOUT_S" --optim.schedule constant --train.log_every_steps 1000 "${@:2}"
}
steps_logged() { local n; n=$(grep -c '"event":"step"' "$1/metrics.jsonl" 2>/dev/null); echo "${n:-0}"; }
elapsed() { awk -v a="$EPOCHREALTIME" -v b="$T0" 'BEGIN { printf "%.1f", a - b }'; }

# submit NAME NODES [sbatch options...] -- [flags...]: sbatch --wait in the background; sets JOB_PID.
submit() {
  local name=$1 n=$2 opts=()
  shift 2
  while (( $# )) && [[ $1 != -- ]]; do opts+=("$1"); shift; done
  shift
  # shellcheck disable=SC2046
  sbatch --wait --job-name="$name" --nodes="$n" --ntasks-per-node=1 --gpus-per-node=1 --time=10 \
    -o "$work/$name.out" "${opts[@]}" "$src/slurm/train.sbatch" "$@" >"$work/$name.sbatch.log" 2>&1 &
  JOB_PID=$!
}

# wait_job LIMIT_S: the exit status of the job submitted last (sbatch --wait), failing after LIMIT_S.
wait_job() {
  local t=0
  while kill -0 "$JOB_PID" 2>/dev/null; do
    sleep 0.5; t=$((t + 1))
    (( t < $1 * 2 )) || { scancel --full "$(squeue -h -o %i | head -n 1)" 2>/dev/null; fail "the job ran past $1 s"; }
  done
  wait "$JOB_PID"
}

# wait_steps RUN_DIR N LIMIT_S
wait_steps() {
  local t=0
  while (( $(steps_logged "$1") < $2 )); do
    sleep 0.1; t=$((t + 1))
    (( t < $3 * 10 )) || fail "$1 did not reach step $2 in $3 s"
    kill -0 "$JOB_PID" 2>/dev/null || fail "the job ended before step $2"
  done
}

# reference RUN_DIR HOSTS: the uninterrupted run with mpirun over HOSTS (node1:1,node2:1,...).
reference() {
  # shellcheck disable=SC2046
  ht_mpirun "$2" "$1.log" "$HT_BIN" train $(flags "$1") || fail "the uninterrupted run on $2"
}

# node_dies NODE: every process on NODE ends at once (hpctrain ranks, slurmstepd, slurmd).
node_dies() { ht_cluster_kill_node "$1" KILL; }

restart_events() {  # restart_events RUN_DIR: the restart events as JSON lines
  grep '"event": "restart"' "$1/metrics.jsonl"
}

launcher=srun
[[ $mode == spare_mpirun ]] && mode=spare launcher=mpirun
case $mode in
spare|elastic)
  ref=$work/ref run=$work/run
  hosts=node1:1,node2:1,node3:1
  reference "$ref" "$hosts"
  spares=0
  [[ $mode == spare ]] && spares=1
  # slow_data_ms: about 40 ms a step, so the kill lands mid-run (numbers unchanged).
  # shellcheck disable=SC2046
  submit "$mode" "$nodes" --export="ALL,HT_LAUNCHER=$launcher,HT_SPARE_NODES=$spares,HT_QUALIFY=0,HT_MAX_RESTARTS=2,HT_LOST_GRACE_S=5,HT_TEST_FAULTS=slow_data_ms=40" \
    -- $(flags "$run")
  wait_steps "$run" 50 90
  T0=$EPOCHREALTIME
  node_dies node3
  at=$(steps_logged "$run")
  echo "node3 died at step $at"
  # The relaunch: a second run_start.
  t=0
  until (( $(grep -c '"event":"run_start"' "$run/metrics.jsonl") >= 2 )); do
    sleep 0.2; t=$((t + 1))
    (( t < 120 * 5 )) || fail "no relaunch within 120 s of node3's death"
    kill -0 "$JOB_PID" 2>/dev/null || fail "the job ended without a relaunch"
  done
  t_relaunch=$(elapsed)
  wait_job 150
  rc=$?
  t_done=$(elapsed)
  [[ $rc == 0 ]] || fail "the job exited $rc after the restart"
  grep -q 'restart 1:' "$work/$mode.out" && fail "the job was requeued"
  restart_events "$run" >"$work/events" || fail "no restart event in metrics.jsonl"
  /usr/bin/python3 - "$ref" "$run" "$mode" "$work/events" <<'PY' || fail "the continuation differs from the uninterrupted run"
import json, os, sys
import h5py, numpy as np
ref, run, mode, events = sys.argv[1:5]
ev = [json.loads(l) for l in open(events)]
assert len(ev) == 1, ev
e = ev[0]
want_nodes = ["node1", "node2", "node4"] if mode == "spare" else ["node1", "node2"]
assert e["failed_hosts"] == ["node3"] and e["nodes"] == want_nodes, e
assert e["mode"] == mode and e["previous_world_size"] == 3 and e["world_size"] == len(want_nodes), e
# srun: the survivors' probes name node3 lost; mpirun ends the job on losing node3's daemon before
# that, and node3's rank is the one without a flight record.
assert ("lost: rank 2" in e["cause"] or "no flight record from rank 2" in e["cause"]), e
assert e["exit_code"] != 0 and e["seconds_since_last_step"] >= 0, e
def recs(d):
    return [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl"))]
starts = [r for r in recs(run) if r["event"] == "run_start"]
assert len(starts) == 2 and starts[1]["hosts"] == want_nodes, [s["hosts"] for s in starts]
def steps(d):
    out = {}
    for r in recs(d):
        if r["event"] == "step": out[r["step"]] = r  # a resumed run's later record of a step stands
    return out
a, b = steps(ref), steps(run)
assert sorted(b) == list(range(1, 121)), sorted(b)[-3:]
if mode == "spare":
    bad = [s for s in a if a[s]["loss"] != b[s]["loss"]]
    assert not bad, f"losses differ at steps {bad[:5]}"
    name = "checkpoints/step-%08d.h5" % 120
    fa, fb = h5py.File(os.path.join(ref, name), "r"), h5py.File(os.path.join(run, name), "r")
    def tensors(f):
        out = {}
        for g in ("param", "momentum"):
            f[g].visititems(lambda n, o: out.__setitem__(g + "/" + n, o[()]) if isinstance(o, h5py.Dataset) else None)
        return out
    ta, tb = tensors(fa), tensors(fb)
    assert ta and set(ta) == set(tb), (sorted(ta), sorted(tb))
    diff = [k for k in ta if not np.array_equal(ta[k], tb[k])]
    assert not diff, f"tensors differ: {diff}"
    print(f"final checkpoint: {len(ta)} tensors bitwise equal to the uninterrupted 3-node run's")
else:
    resumed = starts[1]["resumed_from_step"]
    worst = max(abs(a[s]["loss"] - b[s]["loss"]) / abs(a[s]["loss"]) for s in range(resumed + 1, 121))
    assert worst <= 1e-5, f"worst relative loss difference after the resume {worst:.2e}"
    assert all(a[s]["lr"] == b[s]["lr"] for s in range(1, 121)), "learning rates differ"
    with h5py.File(os.path.join(run, "checkpoints/step-%08d.h5" % 120), "r") as f:
        assert int(f["ints"]["world_size"][0]) == 2
    print(f"resumed from step {resumed} on 2 nodes: losses within {worst:.1e} of the 3-node run, lr identical")
print(f"restart event: {e['cause']}; {e['seconds_since_last_step']} s from the last step to the relaunch")
PY
  "$HT_BIN" report "$run" --out "$work/report" >"$work/report.log" 2>&1 || fail "hpctrain report: $(tail -n 5 "$work/report.log")"
  grep -q 'restart 1 (.*node3: .*cost ' "$work/report/report.md" || fail "the report does not show the restart: $(grep -i restart "$work/report/report.md")"
  grep -h 'failed node\|restart 1 of\|named lost peers\|job step exited' "$work/$mode.out"
  echo "PASS ($mode, $launcher): node3 died at step $at; relaunched on $( [[ $mode == spare ]] && echo node1,node2,node4 || echo node1,node2) $t_relaunch s later," \
    "job done $t_done s after the death, not requeued"
  ;;
repeat)
  run=$work/run
  # shellcheck disable=SC2046
  submit repeat 2 --export="ALL,HT_MAX_RESTARTS=2,HT_TEST_FAULTS=fail_at_step=30;fail_rank=1" -- $(flags "$run")
  wait_job 200
  rc=$?
  [[ $rc == 1 ]] || fail "the job exited $rc, expected 1 after its restarts"
  n=$(restart_events "$run" | wc -l)
  [[ $n == 2 ]] || fail "$n restart events, expected 2"
  restart_events "$run" | grep -q '"mode": "same_nodes"' || fail "restart events not on the same nodes"
  grep -q 'not relaunching: 2 restarts done (HT_MAX_RESTARTS=2); 3 failures at step 30' "$work/repeat.out" ||
    fail "no message naming the repeated step: $(grep 'not relaunching' "$work/repeat.out")"
  launches=$(grep -c 'job step exited with' "$work/repeat.out")
  [[ $launches == 3 ]] || fail "$launches launches, expected 3"
  echo "PASS (repeat): 3 launches failed at step 30, 2 restarts, then: $(grep -o 'not relaunching.*' "$work/repeat.out" | cut -c1-120)"
  ;;
qualify)
  # throttle NODE: stop its hpctrain processes 90 ms of every 100 until unthrottled (pgrep over the
  # node's network namespace: one process, so the processes run free only in the 10 ms).
  holder=$(ht_cluster_pid node2)
  node_ranks() { pgrep --ns "$holder" --nslist net -x hpctrain | tr '\n' ' '; }
  throttle() {
    (
      while :; do
        pids=$(node_ranks)
        if [[ -n $pids ]]; then
          # shellcheck disable=SC2086
          kill -STOP $pids 2>/dev/null; sleep 0.09; kill -CONT $pids 2>/dev/null; sleep 0.01
        else
          sleep 0.02
        fi
      done
    ) &
    THROTTLE_PID=$!
  }
  # shellcheck disable=SC2046
  unthrottle() { kill "$THROTTLE_PID" 2>/dev/null; wait "$THROTTLE_PID" 2>/dev/null; kill -CONT $(node_ranks) 2>/dev/null; }
  throttle node2
  trap 'unthrottle' EXIT
  q="HT_QUALIFY_ARGS=--device cpu --qualify-seconds 1"
  # shellcheck disable=SC2046
  submit qualify 3 --export="ALL,$q,HT_SPARE_NODES=1" -- $(flags "$work/q" --train.global_batch 32 --train.max_steps 40)
  wait_job 200 || fail "the job with a spare exited $?"
  grep -q 'node node2 failed qualification: left out, a spare takes its place' "$work/qualify.out" ||
    fail "qualification did not name and replace node2"
  grep -q '"hosts":\["node1","node3"\]' "$work/q/metrics.jsonl" || fail "the run did not train on node1, node3: $(grep run_start "$work/q/metrics.jsonl" | cut -c1-300)"
  # No spare: a 2-node job with node2 throttled starts anyway (a warning), and the watchdog names node2.
  # shellcheck disable=SC2046
  # Steps of about 50 ms (longer than the throttle's period, so each step on node2 is slowed).
  submit noSpare 2 --export="ALL,$q" -w node1,node2 -- $(flags "$work/n" --train.global_batch 2048 \
    --data.synthetic_samples 4096 --data.synthetic_height 32 --data.synthetic_width 32 --data.synthetic_channels 3 \
    --model.mlp_hidden 256 --train.eval false --watchdog.window_steps 10 --train.max_steps 40)
  wait_job 200 || fail "the job without a spare exited $?"
  grep -q 'warning: node node2 failed qualification, but no spare is left' "$work/noSpare.out" ||
    fail "no warning that node2 stays without a spare"
  grep '"event":"warning"' "$work/n/metrics.jsonl" | grep '"kind":"slow_rank"' | grep -q '"host":"node2"' ||
    fail "the watchdog did not name node2: $(grep '"event":"warning"' "$work/n/metrics.jsonl" | cut -c1-300)"
  # The slow-rank policy (watchdog.slow_rank_stop_windows) with a spare and no qualification: the run
  # stops with exit 4 naming node2 after a checkpoint, and the script relaunches it on node1, node3.
  # shellcheck disable=SC2046
  submit slow 3 --export="ALL,HT_QUALIFY=0,HT_SPARE_NODES=1" -- $(flags "$work/s" --train.global_batch 2048 \
    --data.synthetic_samples 4096 --data.synthetic_height 32 --data.synthetic_width 32 --data.synthetic_channels 3 \
    --model.mlp_hidden 256 --train.eval false --watchdog.window_steps 5 --watchdog.slow_rank_stop_windows 2 \
    --checkpoint.every_steps 10 --train.max_steps 40)
  wait_job 200 || fail "the job with the slow-rank policy exited $?"
  restart_events "$work/s" | grep -q '"exit_code": 4, "cause": "exit 4: node2: slow: rank 1 judged slow' ||
    fail "no restart naming node2 after exit 4: $(restart_events "$work/s")"
  restart_events "$work/s" | grep -q '"mode": "spare", "failed_hosts": \["node2"\], "previous_nodes": \["node1", "node2"\], "nodes": \["node1", "node3"\]' ||
    fail "the relaunch did not put node3 in node2's place: $(restart_events "$work/s")"
  grep -h 'nodes qualified' "$work/qualify.out" "$work/noSpare.out"
  echo "PASS (qualify): node2 throttled: replaced by the spare node3 after qualification; without a spare the run" \
    "starts and the watchdog names node2; with the slow-rank policy the run stops (exit 4) and goes on on node1, node3"
  ;;
esac
