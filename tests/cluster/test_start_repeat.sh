#!/usr/bin/env bash
# Issue 14 item 7: start-up across nodes is not flaky. HT_REPEAT_STARTS (20) consecutive
# `sbatch --nodes=2 slurm/train.sbatch` jobs, each `srun --mpi=pmix` of 4 ranks (2 per node) running a
# short synthetic training (3 steps): every job COMPLETED with exit 0, every run logged all ranks on
# node1,node1,node2,node2 and 3 steps; no rank died of a signal (the SIGSEGV once seen on a second
# node's rank before any output). Prints one line per job (state, exit code, seconds).
# --time=30: train.sbatch asks for USR1 300 s before the time limit, so a limit of 5 minutes or less
# sends it at once (the trainer then checkpoints and requeues, or dies of it before its handler is in).
HT_TEST_CLUSTER_OPTS="--nodes 2 --slurm" HT_TEST_LIMIT_S=${HT_TEST_LIMIT_S:-420}
source "$(dirname "$0")/lib.sh"
n=${HT_REPEAT_STARTS:-20}
jobs=()
for i in $(seq 1 "$n"); do
  # shellcheck disable=SC2046
  # HT_QUALIFY=0: the training step's start-up is under test (the qualification's doctor report
  # would also put "error(s)" into the output that is searched below).
  j=$(HT_QUALIFY=0 sbatch --parsable --job-name="start$i" --nodes=2 --ntasks-per-node=2 --gpus-per-node=2 --time=30 \
        -o "start-$i.out" "$src/slurm/train.sbatch" \
        $(ht_small_flags --train.max_steps 3 --train.eval false --run.dir "$work/start$i")) || fail "sbatch $i"
  jobs+=("$j")
done
failures=0
for i in $(seq 1 "$n"); do
  j=${jobs[$((i - 1))]}
  st=$(ht_slurm_wait_state "$j" '^(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY)$' 120) ||
    fail "job $j ($i of $n) did not finish (state $st)"
  info=$(scontrol show job "$j" 2>/dev/null)
  ec=$(sed -n 's/.* ExitCode=\([0-9:]*\).*/\1/p' <<<"$info" | head -1)
  secs=$(sed -n 's/.* RunTime=\([0-9:]*\).*/\1/p' <<<"$info" | head -1)
  ok=1
  [[ $st == COMPLETED ]] || ok=0
  grep -Eiq 'segmentation|signal [0-9]|core dumped|error' "start-$i.out" && ok=0
  hosts=$(/usr/bin/python3 -c 'import json,sys
r=[json.loads(l) for l in open(sys.argv[1])]
s=[x for x in r if x["event"]=="run_start"]; t=[x for x in r if x["event"]=="step"]
print(",".join(s[0]["hosts"]) if s else "-", len(t))' "start$i/metrics.jsonl" 2>/dev/null)
  [[ $hosts == "node1,node1,node2,node2 3" ]] || ok=0
  printf 'start %2d: job %s %s exit %s run %s hosts/steps %s %s\n' "$i" "$j" "$st" "${ec:-?}" "${secs:-?}" "${hosts:--}" \
    "$([[ $ok == 1 ]] && echo ok || echo FAILED)"
  if [[ $ok == 0 ]]; then
    failures=$((failures + 1))
    echo "---- start-$i.out (without the config echo)"; grep -Ev "^[a-z_0-9]+ = |^\[[a-z]+\]$|^$" "start-$i.out" | tail -n 60
  fi
done
(( failures == 0 )) || fail "$failures of $n two-node srun starts failed"
echo "PASS: $n consecutive 2-node srun --mpi=pmix starts, 0 failures"
