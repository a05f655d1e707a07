#!/usr/bin/env bash
# Issue 14 "Also": launch-time mistakes across nodes get a clear message, not a hang or a silent
# wrong run (src/train/launch_check.hpp), each bounded by `timeout`:
#   1. srun without --mpi=pmix in a 2-node job (--mpi=none): the job fails with Open MPI's message, no
#      task trains;
#   2. ranks whose SLURM_JOB_ID differs (a stale variable on node2): exit 2 on every rank, naming
#      the variable, its values and the hosts;
#   3. OMPI_MCA_* set differently on node2: a warning naming it, training goes on;
#   4. a run directory that is node-local (/tmp is per node): a warning naming node2 and what must be
#      shared; training finishes and rank 0's checkpoint is there;
#   5. a hostfile naming a host that does not exist / a host whose link is down: mpirun fails
#      within seconds (Open MPI's own message), no hang.
HT_TEST_CLUSTER_OPTS="--nodes 2 --slurm" HT_TEST_LIMIT_S=${HT_TEST_LIMIT_S:-280}
source "$(dirname "$0")/lib.sh"
# shellcheck disable=SC2207
small=($(ht_small_flags --train.max_steps 4 --train.eval false --checkpoint.every_steps 2))

# 1. srun without --mpi=pmix: Debian's Open MPI refuses a direct launch without PMI itself, with a
#    message (launch_size_problem covers MPIs that would start singletons instead).
printf '#!/bin/bash\nsrun --mpi=none %q train %s --run.dir %q\n' "$HT_BIN" "${small[*]}" "$work/nopmix" >nopmix.sh
job=$(sbatch --parsable --nodes=2 --ntasks-per-node=2 --time=30 -o nopmix.out nopmix.sh) || fail "sbatch nopmix"
st=$(ht_slurm_wait_state "$job" '^(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL)$' 90) || fail "nopmix job did not end ($st)"
[[ $st == FAILED ]] || fail "srun without --mpi=pmix: job $st, expected FAILED"
grep -q 'direct launched using "srun"' nopmix.out || fail "srun without --mpi=pmix: no message"
[[ ! -e $work/nopmix/metrics.jsonl ]] || fail "srun without --mpi=pmix: a singleton started training"

# 2./3. Environments that differ on node2 (on_node2.sh VAR=VALUE CMD...: exports it on node2 only).
printf '#!/bin/bash\na=$1; shift\n[[ $(hostname) == node2 ]] && export "$a"\nexec "$@"\n' >on_node2.sh
chmod +x on_node2.sh
timeout 120 mpirun --bind-to none --host node1:2,node2:2 -x SLURM_JOB_ID=41 "$work/on_node2.sh" SLURM_JOB_ID=42 \
  "$HT_BIN" train "${small[@]}" --run.dir "$work/jobid" >jobid.log 2>&1
rc=$?
[[ $rc == 2 ]] || fail "different SLURM_JOB_ID: exit $rc, expected 2"
grep -q 'SLURM_JOB_ID differs between ranks: 41 on node1 (ranks 0, 1); 42 on node2 (ranks 2, 3)' jobid.log ||
  fail "different SLURM_JOB_ID: no message naming the values and hosts"
timeout 120 mpirun --bind-to none --host node1:2,node2:2 "$work/on_node2.sh" OMPI_MCA_mpi_yield_when_idle=1 \
  "$HT_BIN" train "${small[@]}" --run.dir "$work/mca" >mca.log 2>&1 || fail "different OMPI_MCA_*: exit $?"
grep -q 'warning: launch: OMPI_MCA_mpi_yield_when_idle differs between ranks: (unset) on node1 (ranks 0, 1); 1 on node2 (ranks 2, 3)' mca.log ||
  fail "different OMPI_MCA_*: no warning"
# ... and no other: the per-process and per-node variables mpirun sets itself (vpid, node rank, the
# local daemon's address, the session directory) differ by design.
n=$(grep -c 'warning: launch:' mca.log)
[[ $n == 1 ]] || fail "different OMPI_MCA_*: $n launch warnings, expected 1: $(grep 'warning: launch:' mca.log | cut -c1-120)"

# 4. A node-local run directory: /tmp is per node.
timeout 120 mpirun --bind-to none --host node1:2,node2:2 "$HT_BIN" train "${small[@]}" --run.dir /tmp/local-run \
  >local.log 2>&1 || fail "node-local run dir: exit $?"
grep -q 'warning: run.dir = /tmp/local-run is not shared between nodes: node2 (ranks 2, 3) cannot see the file rank 0 wrote there on node1' local.log ||
  fail "node-local run dir: no warning naming node2"
grep -q 'a rerun resumes only if its rank 0 runs on node1 again. Put run.dir on a file system every node mounts' local.log ||
  fail "node-local run dir: the warning does not say what must be shared"
[[ -f $HT_CLUSTER_DIR/nodes/node1/tmp/local-run/checkpoints/step-00000004.h5 ]] || fail "no checkpoint in node1's run dir"
grep -q 'not shared between nodes' mca.log && fail "the shared run dir was reported as not shared"
ls "$work/mca"/.shared-probe-* >/dev/null 2>&1 && fail "the probe file was left behind"

# 5. Hostfiles naming an unknown host, and a host whose link is down: an error within seconds.
printf 'node1 slots=1\nnode7 slots=1\n' >hf-unknown
printf 'node1 slots=1\nnode2 slots=1\n' >hf-down
t0=$SECONDS
timeout 60 mpirun --bind-to none --hostfile hf-unknown -np 2 "$HT_BIN" --version >unknown.log 2>&1
rc=$?
(( rc != 0 && rc != 124 )) || fail "hostfile with an unknown host: exit $rc"
grep -q 'Could not resolve hostname node7' unknown.log || fail "hostfile with an unknown host: no message naming node7"
bash "$src/tests/cluster/cluster.sh" link node2 down || fail "link down"
timeout 60 mpirun --bind-to none --hostfile hf-down -np 2 "$HT_BIN" --version >down.log 2>&1
rc=$?
bash "$src/tests/cluster/cluster.sh" link node2 up
(( rc != 0 && rc != 124 )) || fail "hostfile with an unreachable host: exit $rc"
grep -q 'ORTE was unable to reliably start one or more daemons' down.log || fail "unreachable host: no Open MPI message"
(( SECONDS - t0 < 60 )) || fail "the two hostfile failures took $((SECONDS - t0)) s"
echo "PASS: srun without pmix, mixed SLURM_JOB_ID, mixed OMPI_MCA_*, node-local run dir, bad hostfiles: clear messages"
