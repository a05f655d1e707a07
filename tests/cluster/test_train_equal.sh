#!/usr/bin/env bash
# Issue 14 item 1: training on 2 nodes equals training on one. The same small synthetic run (mlp,
# 20 steps, global batch 64) as 1 rank, as 4 ranks on one node and as 4 ranks on 2 nodes, under
# mpirun and under `srun --mpi=pmix` in an `sbatch --nodes=2 slurm/train.sbatch` job: every step loss
# within 1e-5 relative of the 1-rank run (the single-host dp_exactness tolerance); the 2-node runs'
# ranks are on node1, node1, node2, node2 and their traffic really crossed node2's link.
HT_TEST_CLUSTER_OPTS="--nodes 2 --slurm" HT_TEST_LIMIT_S=${HT_TEST_LIMIT_S:-280}
source "$(dirname "$0")/lib.sh"

# shellcheck disable=SC2046
ht_mpirun node1:1 np1.log "$HT_BIN" train $(ht_small_flags --run.dir "$work/np1") || fail "1 rank"
# shellcheck disable=SC2046
ht_mpirun node1:4 n1x4.log "$HT_BIN" train $(ht_small_flags --run.dir "$work/n1x4") || fail "4 ranks on node1"
tx0=$(ht_tx_bytes node2)
# shellcheck disable=SC2046
ht_mpirun node1:2,node2:2 n2x2.log "$HT_BIN" train $(ht_small_flags --run.dir "$work/n2x2") ||
  fail "4 ranks on node1 and node2 (mpirun)"
tx1=$(ht_tx_bytes node2)
ht_compare_losses np1 n1x4 || fail "4 ranks on one node differ from 1 rank"
ht_compare_losses np1 n2x2 || fail "4 ranks on 2 nodes (mpirun) differ from 1 rank"
# Every gradient allreduce crosses the link: 20 steps of an mlp with ~2.4k parameters, at least 20 x 9 kB.
(( tx1 - tx0 > 180000 )) || fail "node2 sent only $((tx1 - tx0)) bytes on eth0: the ranks did not talk over the link"
hosts=$(/usr/bin/python3 -c 'import json,sys
r=[json.loads(l) for l in open(sys.argv[1])]
print(",".join(next(x for x in r if x["event"]=="run_start")["hosts"]))' n2x2/metrics.jsonl) || fail "no hosts in run_start"
[[ $hosts == node1,node1,node2,node2 ]] || fail "2-node run's hosts are '$hosts'"

# The same under Slurm: 2 nodes x 2 tasks, srun --mpi=pmix (train.sbatch's default launcher).
# shellcheck disable=SC2046
job=$(sbatch --parsable --nodes=2 --ntasks-per-node=2 --gpus-per-node=2 --time=10 -o sbatch.out \
  "$src/slurm/train.sbatch" $(ht_small_flags --run.dir "$work/srun2x2")) || fail "sbatch"
st=$(ht_slurm_wait_state "$job" '^(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY)$' 150) ||
  fail "sbatch job $job did not finish (state $st)"
[[ $st == COMPLETED ]] || fail "sbatch job $job ended $st"
grep -q 'via srun' sbatch.out || fail "the job did not launch with srun"
ht_compare_losses np1 srun2x2 || fail "4 ranks on 2 nodes (srun --mpi=pmix) differ from 1 rank"
hosts=$(/usr/bin/python3 -c 'import json,sys
r=[json.loads(l) for l in open(sys.argv[1])]
print(",".join(next(x for x in r if x["event"]=="run_start")["hosts"]))' srun2x2/metrics.jsonl)
[[ $hosts == node1,node1,node2,node2 ]] || fail "srun run's hosts are '$hosts'"
echo "PASS: 1 rank = 4 ranks on node1 = 4 ranks on node1+node2 (mpirun, srun --mpi=pmix); node2 sent $((tx1 - tx0)) bytes"
