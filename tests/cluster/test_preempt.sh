#!/usr/bin/env bash
# Issue 14 item 5: preemption of a multi-node job. tests/slurm/test_preempt.sh (slurm/train.sbatch
# preempted with USR1, requeued, resumed; final parameters and momentum bitwise equal to an
# uninterrupted run's, every loss after the resume equal) on 2 nodes x 1 task of the simulated
# cluster, both jobs at once; then both runs must have had their ranks on node1 and node2.
HT_TEST_CLUSTER_OPTS="--nodes 2 --slurm" HT_TEST_LIMIT_S=${HT_TEST_LIMIT_S:-280}
source "$(dirname "$0")/lib.sh"
HT_PREEMPT_SBATCH_ARGS="--nodes=2 --ntasks-per-node=1 --gpus-per-node=1" bash "$src/tests/slurm/test_preempt.sh" ||
  exit $?
/usr/bin/python3 - "$work/ref" "$work/pre" <<'PY' || fail "the jobs did not run on 2 nodes"
import json, sys
for d in sys.argv[1:]:
    starts = [r for r in map(json.loads, open(d + "/metrics.jsonl")) if r["event"] == "run_start"]
    assert starts and all(s["hosts"] == ["node1", "node2"] for s in starts), (d, [s["hosts"] for s in starts])
print("every run_start of both jobs on node1, node2")
PY
echo "PASS: 2-node preemption and requeue, bitwise equal to the uninterrupted 2-node run"
