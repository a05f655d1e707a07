#!/usr/bin/env bash
# Issue 15: ranks in containers on 2 nodes of the simulated cluster (tests/cluster/cluster.sh), ctest
# labels `container` and `multinode`. Steps:
#   1. on the host: the project's CPU image, built from this checkout or reused
#      (tests/container/image.sh, as tests/container/test_container.sh does);
#   2. in a fresh 2-node cluster with Slurm (tests/cluster/lib.sh re-runs this script on node1):
#      each node gets its own podman storage, run and temporary directories in its private /tmp, with
#      the host's image store as a read-only additional store (the image is built once, every node
#      reads it; no node's podman touches the host's or the other node's container state);
#   3. the reference: the host's build, 4 ranks on node1:2,node2:2 under mpirun, outside containers;
#   4. host mpirun across the nodes (rsh agent tests/cluster/node_rsh.sh) starting `podman run` per
#      rank (the node's network, IPC, UTS; the command slurm/train.sbatch uses): 2 rank containers
#      started on each node, ranks on node1,node1,node2,node2, traffic over node2's link;
#   5. `sbatch --nodes=2 slurm/train.sbatch` with HT_CONTAINER set (srun --mpi=pmix, podman; the node
#      qualification runs first, in the image too): the
#      same, with no hpctrain on the job's PATH or in HT_BIN.
# Both container runs' step losses must equal the reference's within 1e-5 relative (the tolerance
# of tests/cluster/test_train_equal.sh); the test also says whether they are bitwise equal.
# The training: fmnist_cnn on synthetic 28x28 images, 8 steps, global batch 32.
# Exit 77 with the reason when podman (not root, no tools, no namespaces, no base image) or the
# cluster cannot run. Environment: HT_BIN (host build), HT_CONTAINER_IMAGE (default
# localhost/hpctrain-test:cpu, the tag test_container.sh builds), HT_TEST_LIMIT_S (the cluster part's
# time limit, 420 s).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)

if [[ -z ${HT_CLUSTER_DIR:-} ]]; then
  # ---- 1. on the host: the image (the host's podman storage, which every node reads) ------------
  t0=$SECONDS
  # shellcheck source=image.sh
  source "$here/image.sh"
  ht_ctr_ready || exit $?
  [[ -x ${HT_BIN:-$ht_ctr_src/build/hpctrain} ]] || { echo "FAIL: HT_BIN '${HT_BIN:-$ht_ctr_src/build/hpctrain}' missing (build hpctrain first)" >&2; exit 1; }
  driver=$(podman info --format '{{.Store.GraphDriverName}}')
  [[ $driver == overlay ]] || { echo "SKIP: podman's storage driver is '$driver': the nodes' read-only image store needs overlay"; exit 77; }
  log=$(mktemp "${TMPDIR:-/tmp}/ht-ctr2node-build.XXXXXX")
  ht_ctr_build "${HT_CONTAINER_IMAGE:-localhost/hpctrain-test:cpu}" "$log"
  rc=$?
  rm -f "$log"
  # The nodes read the host's image store at its path (the nodes' own configs name it).
  HT_CTR_STORE=$(podman info --format '{{.Store.GraphRoot}}')
  [[ -n ${HT_PODMAN_CONF_DIR:-} ]] && rm -rf "$HT_PODMAN_CONF_DIR"
  (( rc == 0 )) || exit $rc
  echo "==== [$(( SECONDS - t0 )) s] image ready in the host's store $HT_CTR_STORE"
  export HT_CTR_IMAGE_ID=$ht_ctr_id HT_CTR_COMMIT=$ht_ctr_commit HT_CTR_STORE
  unset CONTAINERS_CONF HT_PODMAN_CONF_DIR
fi

HT_TEST_CLUSTER_OPTS="--nodes 2 --slurm" HT_TEST_LIMIT_S=${HT_TEST_LIMIT_S:-420}
# shellcheck source=../cluster/lib.sh
source "$here/../cluster/lib.sh"
t0=$SECONDS
phase() { echo "==== [$(( SECONDS - t0 )) s] $*"; }
id=${HT_CTR_IMAGE_ID:?set by the host part of this test}
store=${HT_CTR_STORE:?set by the host part of this test}

# ---- 2. podman on every node: own storage and state in the node's /tmp, the host's images read-only
# The same paths on every node name different directories (each node has its own /tmp), so one
# CONTAINERS_CONF / CONTAINERS_STORAGE_CONF serves all of them, also through sbatch and srun.
# Shared state would not do: libpod's locks live in /dev/shm, which is per node, while its database
# would be the host's, so two nodes would hand out the same lock numbers.
phase "podman on node1 and node2 (per-node storage, the host's image store read-only)"
source "$src/containers/podman_env.sh"
ht_podman_env   # runc and the default ulimits podman needs here (in node1's /tmp)
pc=$work/podman-conf
mkdir -p "$pc"
# Our settings go first in [engine]; the rest of podman_env.sh's file follows.
awk '{ print } /^\[engine\]/ { print "tmp_dir = \"/tmp/ht-podman/libpod\""
  print "events_logger = \"file\""; print "events_logfile_path = \"/tmp/ht-podman/events.log\"" }' \
  "$CONTAINERS_CONF" >"$pc/containers.conf"
grep -q '^\[engine\]' "$pc/containers.conf" || printf '[engine]\ntmp_dir = "/tmp/ht-podman/libpod"\nevents_logger = "file"\nevents_logfile_path = "/tmp/ht-podman/events.log"\n' >>"$pc/containers.conf"
[[ -n ${HT_PODMAN_CONF_DIR:-} ]] && rm -rf "$HT_PODMAN_CONF_DIR"
cat >"$pc/storage.conf" <<EOF
[storage]
driver = "overlay"
graphroot = "/tmp/ht-podman/root"
runroot = "/tmp/ht-podman/run"
[storage.options]
additionalimagestores = ["$store"]
EOF
export CONTAINERS_CONF=/tmp/ht-podman/containers.conf CONTAINERS_STORAGE_CONF=/tmp/ht-podman/storage.conf
for n in $HT_CLUSTER_HOSTS; do
  "$src/tests/cluster/node_exec.sh" "$n" sh -c 'mkdir -p /tmp/ht-podman && cp "$1"/*.conf /tmp/ht-podman/' sh "$pc" ||
    fail "$n: cannot write /tmp/ht-podman"
  info=$("$src/tests/cluster/node_exec.sh" "$n" podman info --format '{{.Store.GraphRoot}} {{.Store.RunRoot}}' 2>&1) ||
    fail "$n: podman info: $info"
  [[ $info == "/tmp/ht-podman/root /tmp/ht-podman/run" ]] || fail "$n: podman uses '$info', not the node's own storage"
  "$src/tests/cluster/node_exec.sh" "$n" podman image exists "$id" || fail "$n: image $id not in the read-only store $store"
  echo "$n: podman storage $info, image ${id:0:12} from $store (read-only)"
done

# rank_containers NODE: how many containers have started on NODE so far (its podman state is this
# test's own: every one is a rank's, or the --version check below).
rank_containers() {
  "$src/tests/cluster/node_exec.sh" "$1" podman events --stream=false --filter event=start \
    --format '{{.ID}}' 2>/dev/null | wc -l
}
# hosts_of RUN_DIR: the ranks' hosts from run_start, comma-separated.
hosts_of() {
  /usr/bin/python3 -c 'import json,sys
r=[json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl")]
print(",".join(next(x for x in r if x["event"]=="run_start")["hosts"]))' "$1"
}
# check_run RUN_DIR WHAT: the ranks' hosts, the image's build, and the losses against the reference.
check_run() {
  local h
  h=$(hosts_of "$1") || fail "$2: no run_start in $1/metrics.jsonl"
  [[ $h == node1,node1,node2,node2 ]] || fail "$2: ranks on '$h', expected node1,node1,node2,node2"
  ht_compare_losses "$work/host" "$1" 1e-5 || fail "$2: losses differ from the 4-rank run outside containers"
  if cmp -s <(ht_losses "$work/host") <(ht_losses "$1"); then
    echo "$2: $(ht_losses "$1" | wc -l) step losses bitwise equal to the run outside containers"
  else
    echo "$2: step losses within 1e-5 of the run outside containers (not bitwise)"
  fi
}

# The training every run repeats (CFG: the config's path, the host's or the image's copy).
flags() {  # flags CFG RUN_DIR
  ht_small_flags --config "$1" --model.name fmnist_cnn --data.synthetic_samples 512 \
    --data.synthetic_height 28 --data.synthetic_width 28 --data.synthetic_channels 1 \
    --train.global_batch 32 --train.max_steps 8 --train.log_every_steps 4 --train.eval false \
    --run.dir "$2"
}

# ---- 3. the reference: host build, 4 ranks on 2 nodes, no containers -----------------------------
phase "reference: host build, mpirun 4 ranks on node1:2,node2:2"
# shellcheck disable=SC2046
ht_mpirun node1:2,node2:2 host.log "$HT_BIN" train $(flags "$src/configs/fmnist_cnn.ini" "$work/host") ||
  fail "4 ranks on 2 nodes outside containers"
[[ $(hosts_of "$work/host") == node1,node1,node2,node2 ]] || fail "reference ranks on '$(hosts_of "$work/host")'"

# ---- 4. host mpirun across the nodes, podman run per rank -----------------------------------------
phase "host mpirun across node1 and node2, one podman container per rank"
# slurm/train.sbatch's podman rank command (HT_CONTAINER_RUNTIME=podman), run as root here.
rank=(podman run --rm --network=host --ipc=host --pid=host --uts=host --user 0:0 --env 'OMPI_*' --env 'PMIX_*'
      --env OMP_NUM_THREADS --env OMPI_MCA_btl_vader_single_copy_mechanism=none -v "$work:$work" -v /tmp:/tmp "$id")
tx0=$(ht_tx_bytes node2) b1=$(rank_containers node1) b2=$(rank_containers node2)
# shellcheck disable=SC2046
ht_mpirun node1:2,node2:2 mpirun_podman.log "${rank[@]}" train $(flags /opt/hpctrain/configs/fmnist_cnn.ini "$work/mpirun_podman") ||
  fail "host mpirun + podman run per rank on 2 nodes"
tx1=$(ht_tx_bytes node2)
c1=$(( $(rank_containers node1) - b1 )) c2=$(( $(rank_containers node2) - b2 ))
(( c1 == 2 && c2 == 2 )) || fail "expected 2 rank containers started on each node, saw node1 $c1, node2 $c2"
# 8 allreduces of fmnist_cnn's 421,738 fp32 gradients (1.7 MB) cross the link, whatever the algorithm.
(( tx1 - tx0 > 8 * 1000000 )) || fail "node2 sent only $(( tx1 - tx0 )) bytes on eth0: the containers' ranks did not talk over the link"
grep -q "commit: $HT_CTR_COMMIT" <("$src/tests/cluster/node_exec.sh" node2 podman run --rm --network=none "$id" --version) ||
  fail "the image on node2 is not this checkout's build ($HT_CTR_COMMIT)"
echo "rank containers: node1 $c1, node2 $c2; node2 sent $(( (tx1 - tx0) / 1000 )) kB on eth0"
check_run "$work/mpirun_podman" "host mpirun + podman per rank"

# ---- 5. Slurm: sbatch --nodes=2 slurm/train.sbatch with HT_CONTAINER ------------------------------
phase "sbatch --nodes=2 slurm/train.sbatch, HT_CONTAINER (srun --mpi=pmix, podman per rank)"
# No hpctrain on the job's PATH or in HT_BIN: only the image's can run.
b1=$(rank_containers node1) b2=$(rank_containers node2)
# shellcheck disable=SC2046
job=$(env -u HT_BIN HT_CONTAINER="$id" HT_CONTAINER_MOUNTS="$work" sbatch --parsable --job-name=ctr2 \
  --nodes=2 --ntasks-per-node=2 --gpus-per-node=2 --time=10 -o sbatch.out \
  "$src/slurm/train.sbatch" $(flags /opt/hpctrain/configs/fmnist_cnn.ini "$work/sbatch_podman")) || fail "sbatch"
job=${job%%;*}
st=$(ht_slurm_wait_state "$job" '^(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY)$' 200) ||
  fail "sbatch job $job did not finish (state $st)"
[[ $st == COMPLETED ]] || fail "sbatch job $job ended $st"
grep -E 'container:|via srun' sbatch.out
grep -q "container: $id via podman" sbatch.out || fail "the job's ranks did not run in the container"
grep -q 'via srun' sbatch.out || fail "the job did not launch with srun"
# Per node: 2 for the node qualification (hpctrain doctor --qualify, on by default on 2+ nodes,
# in the image too), then 2 for training.
c1=$(( $(rank_containers node1) - b1 )) c2=$(( $(rank_containers node2) - b2 ))
(( c1 == 4 && c2 == 4 )) || fail "sbatch: expected 2 qualification and 2 rank containers started on each node, saw node1 $c1, node2 $c2"
grep -q '2 of 2 nodes qualified' sbatch.out || fail "sbatch: no qualification verdict from the image's doctor: $(grep -i qualif sbatch.out)"
echo "containers (qualification + ranks): node1 $c1, node2 $c2"
check_run "$work/sbatch_podman" "sbatch --nodes=2 train.sbatch, HT_CONTAINER"
phase "PASS: 4 ranks in containers on 2 nodes (host mpirun + podman; sbatch/srun + podman) = 4 ranks outside containers"
