#!/usr/bin/env bash
# Every blocking MPI call of a run is bounded by the collective guard (mpi/collective_guard.hpp): run
# with hpctrain_guard_audit (hpctrain plus the MPI profiling layer of mpi_guard_audit.cpp) on 2 ranks,
# through the paths a job takes: training with every periodic collective due (watchdog windows, replica
# checks, evaluation at each epoch's end, checkpoints written by the asynchronous writer, the trace),
# a resume, a preemption (SIGUSR1: the stop agreed at a step boundary, exit 75) and doctor. Each rank
# must report at MPI_Finalize that it made blocking MPI calls and none outside a CollectiveWait; a call
# outside one is printed with its stack.
# Environment (ctest): HT_GUARD_AUDIT_BIN, HT_MPIEXEC, OMPI_* for root and oversubscription.
set -uo pipefail
bin=${HT_GUARD_AUDIT_BIN:?HT_GUARD_AUDIT_BIN: the hpctrain_guard_audit executable}
mpirun=${HT_MPIEXEC:-mpirun}
work=$(mktemp -d /tmp/ht-guard-audit.XXXXXX)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1
fails=0

flags=(--data.synthetic true --data.synthetic_height 8 --data.synthetic_width 8
  --data.synthetic_channels 1 --model.name mlp --model.mlp_hidden 32 --run.seed 7 --train.device cpu
  --train.threads 1 --train.global_batch 64 --train.log_every_steps 5 --optim.schedule constant
  --watchdog.window_steps 4 --dist.check_replicas_every 5 --checkpoint.every_steps 7 --checkpoint.async true
  --trace.enabled true --dist.timeout_s 60)

# check NAME LOG WANT_RC RC: the exit code, and each rank's audit summary.
check() {
  local name=$1 log=$2 want=$3 rc=$4 r line
  if [[ $rc != "$want" ]]; then
    echo "FAIL ($name): exit $rc, expected $want"; tail -n 30 "$log"; fails=$((fails + 1)); return
  fi
  if grep -q "outside a CollectiveWait:" "$log"; then
    echo "FAIL ($name): blocking MPI calls without a time limit:"
    grep -E "outside a CollectiveWait:|^    #" "$log" | head -n 60
    fails=$((fails + 1))
  fi
  for r in 0 1; do
    line=$(grep "^hpctrain guard audit: rank $r: [0-9]* blocking MPI calls" "$log")
    if [[ -z $line ]]; then
      echo "FAIL ($name): rank $r printed no audit summary (did it reach MPI_Finalize?)"; fails=$((fails + 1))
    elif [[ ! $line =~ :\ [1-9][0-9]*\ blocking\ MPI\ calls,\ 0\ outside ]]; then
      echo "FAIL ($name): $line"; fails=$((fails + 1))
    else
      echo "$name: $line"
    fi
  done
}

run() {  # run NAME WANT_RC ARGS...: hpctrain_guard_audit on 2 ranks
  local name=$1 want=$2
  shift 2
  "$mpirun" --oversubscribe --bind-to none -np 2 "$bin" "$@" >"$work/$name.log" 2>&1
  check "$name" "$work/$name.log" "$want" $?
}

# 3 epochs of 10 steps: 7 watchdog windows, replica checks, 3 evaluations, 4 checkpoints, the trace.
run train 0 train "${flags[@]}" --run.dir "$work/run" --data.synthetic_samples 640 --train.epochs 3 --train.accumulation_steps 2
grep -q '"event": *"eval"' "$work/run/metrics.jsonl" || { echo "FAIL (train): no eval record"; fails=$((fails + 1)); }
[[ -s $work/run/trace.json ]] || { echo "FAIL (train): no trace.json"; fails=$((fails + 1)); }
run resume 0 train "${flags[@]}" --run.dir "$work/run" --data.synthetic_samples 640 --train.epochs 4 --train.accumulation_steps 2
grep -q '"event": *"resume"\|resum' "$work/resume.log" || { echo "FAIL (resume): the run did not resume"; fails=$((fails + 1)); }

# Preemption: USR1 to mpirun (which forwards it to the ranks) once steps are being logged.
"$mpirun" --oversubscribe --bind-to none -np 2 "$bin" train "${flags[@]}" --run.dir "$work/pre" \
  --data.synthetic_samples 400000 --train.epochs 0 --train.max_steps 100000 >"$work/preempt.log" 2>&1 &
pid=$!
for _ in $(seq 300); do
  grep -q '"event": *"step"' "$work/pre/metrics.jsonl" 2>/dev/null && break
  sleep 0.1
done
sleep 1
kill -USR1 "$pid"
wait "$pid"
check preempt "$work/preempt.log" 75 $?

run doctor 0 doctor --device cpu
run bench 0 bench allreduce --min-bytes 4K --max-bytes 64K --iters 3 --warmup 1 --bucket-count 2 --bucket-mb 1

(( fails == 0 )) || { echo "FAIL: $fails check(s) failed"; exit 1; }
echo "PASS: every blocking MPI call of train, resume, preemption, doctor and bench allreduce was inside a CollectiveWait"
