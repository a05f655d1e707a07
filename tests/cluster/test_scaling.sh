#!/usr/bin/env bash
# Issue 14 item 8: slurm/scaling.sh --nodes "1 2 4" on a 4-node simulated cluster (one rank per node,
# small sweeps: allreduce up to 1 MB, 2 timed training steps) produces a study whose allreduce points
# come from inter-node runs (the ranks of allreduce-n2/n4 on 2 and 4 different hosts, over TCP on
# eth0) and whose `measured` fabric is fitted to them. The committed full-size run is in
# results/cpu/cluster/ (its README has the command).
HT_TEST_CLUSTER_OPTS="--nodes 4 --slurm" HT_TEST_LIMIT_S=${HT_TEST_LIMIT_S:-400}
source "$(dirname "$0")/lib.sh"
export HT_BENCH_AR_ARGS="--max-bytes 1M" HT_BENCH_STEPS=2 HT_BENCH_WARMUP=1
tx0=$(ht_tx_bytes node4)
"$src/slurm/scaling.sh" --nodes "1 2 4" --gpus-per-node 1 --batch-per-gpu 8 --global-batch 32 --cluster testcluster --results "$work/sweep" --wait \
  >scaling.log 2>&1 || fail "scaling.sh --wait"
tx1=$(ht_tx_bytes node4)
/usr/bin/python3 - "$work/sweep" <<'PY' || fail "the study"
import csv, json, os, sys
sweep = sys.argv[1]
for n in (2, 4):
    j = json.load(open(os.path.join(sweep, f"n{n}", f"allreduce-n{n}.json")))
    hosts = j.get("hosts")
    assert hosts and len(set(hosts)) == n, (n, hosts)
    assert j["wrong_total"] == 0 and j["results"], "wrong allreduce elements or no results"
rows = list(csv.DictReader(open(os.path.join(sweep, "study", "scaling.csv"))))
assert rows, "empty scaling.csv"
assert any(r.get("kind") == "measured" for r in rows), "no measured points"
systems = {r.get("system") for r in rows}
assert any("measured" in (s or "") for s in systems), systems
print("study:", len(rows), "rows; systems", sorted(s for s in systems if s))
PY
grep -q 'measured: 4 ranks' "$work/sweep/collect.out" || fail "the measured fabric is not fitted to the 4-rank (4-node) allreduce"
(( tx1 - tx0 > 1000000 )) || fail "node4 sent only $((tx1 - tx0)) bytes: the sweep did not cross the link"
echo "PASS: scaling.sh over 1, 2, 4 nodes; allreduce points across nodes, measured fabric fitted to them"
