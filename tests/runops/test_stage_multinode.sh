#!/usr/bin/env bash
# Issue 16, staging across nodes: 4 ranks on the test cluster's 2 nodes (tests/cluster/, each node
# with its own /tmp) stage data.stage_dir=/tmp/stage once per node (one copy on node1, one on node2),
# train with losses bitwise equal to the same 4-rank run read from the shared data.dir, and the next
# start copies nothing. Needs the simulated cluster (helper "cluster"); 77 where it is not there.
here=$(cd "$(dirname "$0")" && pwd)
lib=${HT_CLUSTER_LIB:-$here/../cluster/lib.sh}
[[ -f $lib ]] || { echo "skipped: no tests/cluster/lib.sh (the multi-node test cluster)"; exit 77; }
export HT_CLUSTER_LIB=$lib
HT_TEST_CLUSTER_OPTS="--nodes 2" HT_TEST_LIMIT_S=${HT_TEST_LIMIT_S:-200}
# shellcheck source=/dev/null
source "$lib"

/usr/bin/python3 - "$work/data" "$here/../dataset" <<'PY' || fail "writing the dataset"
import os, sys
import numpy as np
sys.path.insert(0, sys.argv[2])
from common import write_shard
d = sys.argv[1]
os.makedirs(d, exist_ok=True)
rng = np.random.default_rng(0)
for i in range(2):
    write_shard(f"{d}/train-{i:05d}-of-00002.h5", rng.integers(0, 256, (128, 8, 8, 1), dtype=np.uint8),
                rng.integers(0, 10, 128).astype(np.int32), split="train", index=i, num=2)
write_shard(f"{d}/test-00000-of-00001.h5", rng.integers(0, 256, (32, 8, 8, 1), dtype=np.uint8),
            rng.integers(0, 10, 32).astype(np.int32), split="test", index=0, num=1)
PY
flags="--data.dir $work/data --model.name mlp --model.mlp_hidden 32 --train.device cpu --train.threads 1
  --train.global_batch 64 --train.epochs 2 --watchdog.enabled false"
# shellcheck disable=SC2086
ht_mpirun node1:2,node2:2 plain.log "$HT_BIN" train $flags --run.dir "$work/plain" || fail "unstaged run"
# shellcheck disable=SC2086
ht_mpirun node1:2,node2:2 staged.log "$HT_BIN" train $flags --run.dir "$work/staged" --data.stage_dir /tmp/stage ||
  fail "staged run"
lines=$(grep -c '^hpctrain: stage:' staged.log)
(( lines == 2 )) || fail "expected one staging line per node, got $lines"
grep -q '^hpctrain: stage: host node1 (ranks of this node: 2): 3 of 3 shard(s) copied' staged.log || fail "node1 did not copy"
grep -q '^hpctrain: stage: host node2 (ranks of this node: 2): 3 of 3 shard(s) copied' staged.log || fail "node2 did not copy"
for n in node1 node2; do
  c=$("$src/tests/cluster/node_exec.sh" $n sh -c 'ls /tmp/stage/data-*/*.h5 | wc -l')
  [[ $c == 3 ]] || fail "$n holds $c staged shards, not 3"
done
ht_compare_losses plain staged 0 || fail "the staged run's losses differ from the unstaged run's"
# shellcheck disable=SC2086
ht_mpirun node1:2,node2:2 again.log "$HT_BIN" train $flags --run.dir "$work/again" --data.stage_dir /tmp/stage ||
  fail "second staged run"
(( $(grep -c '0 of 3 shard(s) copied.*3 already staged' again.log) == 2 )) || fail "the second start copied again"
echo "PASS: 4 ranks on 2 nodes stage once per node; losses equal the unstaged run; the next start copies nothing"
