#!/usr/bin/env bash
# The container recipe, built and run for real (ctest label `container`; not in scripts/test.sh's
# default run, see README "Containers"). Steps, each timed:
#   1. tools (containers/install_tools.sh) and the Debian 12 base image (containers/build_base.sh:
#      mmdebstrap, cached), then `podman build` of containers/Containerfile on it (CPU);
#   2. in the image: `hpctrain --version` (the host checkout's commit), `hpctrain doctor --device cpu`,
#      `hpctrain prepare` of Debian's Fashion-MNIST, a 2-rank training (mpirun inside one container),
#      `hpctrain report` on that run (report.md, summary.json and the PNGs);
#   3. the hybrid model, each rank in its own container: host mpirun starting `podman run` per rank,
#      and host mpirun starting `ch-run` per rank on a SquashFS image of the same image;
#   4. single-node Slurm (tests/slurm/cluster.sh): `sbatch slurm/train.sbatch` with HT_CONTAINER set,
#      preempted with USR1 mid-run, requeued, and resumed inside the container.
# Every training has the same arguments, and its losses must equal, step for step and bit for bit,
# those of the same 2-rank run of the host's build outside any container (the image is built from
# the same sources with the same Debian compiler and libraries).
# Exit 77 with the reason when the tools cannot run (not root, apt or the archive unreachable, no
# namespaces). Environment: HT_BIN (host build), HT_CONTAINER_KEEP=1 keeps the work directory,
# HT_CONTAINER_IMAGE (default localhost/hpctrain-test:cpu).
set -uo pipefail

src=$(cd "$(dirname "$0")/../.." && pwd)
HT_BIN=${HT_BIN:-$src/build/hpctrain}
image=${HT_CONTAINER_IMAGE:-localhost/hpctrain-test:cpu}
t0=$SECONDS
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
phase() { echo "==== [$(( SECONDS - t0 )) s] $*"; }
export USER=${USER:-$(id -un)}  # ch-run insists on it

# Root, the tools, namespaces, a working podman (tests/container/image.sh; exit 77 with the reason).
# shellcheck source=image.sh
source "$src/tests/container/image.sh"
ht_ctr_ready || exit $?
[[ -x $HT_BIN ]] || fail "HT_BIN '$HT_BIN' missing (build hpctrain first)"

work=$(mktemp -d /tmp/ht-container.XXXXXX)
cleanup() {
  local rc=$?
  podman ps -aq --filter "ancestor=$image" 2>/dev/null | xargs -r podman rm -f >/dev/null 2>&1
  rmdir /var/tmp/"$(basename "$work")"-rank* 2>/dev/null
  if [[ ${HT_CONTAINER_KEEP:-0} == 1 ]]; then echo "kept $work"; else rm -rf "$work"; fi
  [[ -n ${HT_PODMAN_CONF_DIR:-} ]] && rm -rf "$HT_PODMAN_CONF_DIR"
  return $rc
}
trap cleanup EXIT
# The image runs as its unprivileged user: it writes the shards, doctor checks and runs write here.
chmod 777 "$work"

# ---- 1. base image and recipe -------------------------------------------------------------------
phase "base image and podman build"
ht_ctr_build "$image" "$work/build.log" || exit $?
commit=$ht_ctr_commit size=$ht_ctr_size
user=$(podman image inspect --format '{{.Config.User}}' "$image")
[[ $user == hpctrain ]] || fail "image runs as '$user', expected the non-root user hpctrain"
entry=$(podman image inspect --format '{{json .Config.Entrypoint}}' "$image")
[[ $entry == '["hpctrain"]' ]] || fail "entry point $entry, expected [\"hpctrain\"]"
# Only runtime libraries: no compiler, no headers.
podman run --rm --network=none --entrypoint /bin/sh "$image" -c \
  'for f in /usr/bin/g++ /usr/bin/cc /usr/bin/cmake /usr/include/hdf5 /usr/include/oneapi; do [ -e "$f" ] && echo "$f"; done; true' \
  >"$work/devfiles" 2>&1
[[ ! -s $work/devfiles ]] || fail "runtime image has build files: $(tr '\n' ' ' <"$work/devfiles")"

# ---- 2. inside one container --------------------------------------------------------------------
phase "hpctrain --version in the container"
prun=(podman run --rm -v "$work:$work")
"${prun[@]}" --network=none "$image" --version >"$work/version.txt" 2>&1 || { cat "$work/version.txt"; fail "hpctrain --version"; }
cat "$work/version.txt"
grep -q "^hpctrain " "$work/version.txt" || fail "--version prints no 'hpctrain VERSION' line"
grep -q "commit: $commit" "$work/version.txt" || fail "--version does not show the commit $commit"
grep -qi "onednn" "$work/version.txt" || fail "--version names no oneDNN version"

phase "hpctrain doctor --device cpu in the container"
"${prun[@]}" --network=none "$image" doctor --device cpu --run-dir "$work" >"$work/doctor.txt" 2>&1 ||
  { cat "$work/doctor.txt"; fail "hpctrain doctor --device cpu exited non-zero"; }
tail -n 5 "$work/doctor.txt"

phase "hpctrain prepare (Fashion-MNIST) in the container, as the image's user"
fm=/usr/share/datasets/fashion-mnist
[[ -d $fm ]] || fail "$fm missing (dataset-fashion-mnist, scripts/install_deps.sh)"
"${prun[@]}" --network=none -v "$fm:$fm:ro" "$image" prepare --format fashion-mnist --input "$fm" \
  --output "$work/fmnist" --shards 2 >"$work/prepare.log" 2>&1 || { cat "$work/prepare.log"; fail "prepare"; }
[[ $(stat -c %u "$work/fmnist") != 0 ]] || fail "prepare ran as root in the container"
ls "$work/fmnist"

steps=40
train_args() {  # train_args CONFIG RUN_DIR: the one training every run below repeats
  echo --config "$1" --data.dir "$work/fmnist" --data.limit_train 2048 --data.limit_test 500 \
    --train.global_batch 32 --train.max_steps $steps --train.eval false --train.device cpu \
    --checkpoint.every_steps 20 --run.dir "$2"
}
mpi=(mpirun -np 2 --oversubscribe --bind-to none --allow-run-as-root -x OMP_NUM_THREADS=1)
export OMP_NUM_THREADS=1

phase "reference: the host build, 2 ranks, outside any container"
# shellcheck disable=SC2046
"${mpi[@]}" "$HT_BIN" train $(train_args "$src/configs/fmnist_cnn.ini" "$work/host") --run.fresh \
  >"$work/host.log" 2>&1 || { tail -n 30 "$work/host.log"; fail "host training"; }

same_losses() {  # same_losses RUN_DIR WHAT: every step's loss equals the host run's
  /usr/bin/python3 - "$work/host" "$1" "$steps" <<'PY' || fail "$2: losses differ from the run outside the container"
import json, sys
ref, run, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
def losses(d):
    return {e["step"]: e["loss"] for e in map(json.loads, open(d + "/metrics.jsonl")) if e["event"] == "step"}
a, b = losses(ref), losses(run)
assert sorted(a) == list(range(1, steps + 1)), sorted(a)[:5]
assert sorted(b) == sorted(a), "steps %s vs %s" % (sorted(b)[:3], sorted(a)[:3])
bad = [s for s in a if a[s] != b[s]]
assert not bad, "steps %s: %s vs %s" % (bad[:5], [b[s] for s in bad[:3]], [a[s] for s in bad[:3]])
print("losses identical over %d steps (step 1 %.6f, step %d %.6f)" % (len(a), a[1], steps, a[steps]))
PY
}

phase "2 ranks in one container (mpirun inside)"
# shellcheck disable=SC2046
"${prun[@]}" --network=none --entrypoint mpirun "$image" -np 2 --oversubscribe --bind-to none \
  -x OMP_NUM_THREADS=1 hpctrain train $(train_args /opt/hpctrain/configs/fmnist_cnn.ini "$work/inside") --run.fresh \
  >"$work/inside.log" 2>&1 || { tail -n 30 "$work/inside.log"; fail "training inside one container"; }
same_losses "$work/inside" "mpirun inside one container"

phase "hpctrain report in the container, on that run"
# The image's Python tools: scripts/report.py with matplotlib (Agg), as the image's user.
"${prun[@]}" --network=none "$image" report "$work/inside" --out "$work/report" >"$work/report.log" 2>&1 ||
  { cat "$work/report.log"; fail "hpctrain report exited non-zero in the container"; }
tail -n 1 "$work/report.log"
/usr/bin/python3 - "$work/report" "$steps" <<'PY' || fail "hpctrain report in the container: outputs missing or wrong"
import json, os, sys
out, steps = sys.argv[1], int(sys.argv[2])
s = json.load(open(os.path.join(out, "summary.json")))
assert s["runs"][0]["steps"] == steps, s["runs"][0]["steps"]
pngs = [f for f in s["files"] if f.endswith(".png")]
assert "loss_lr.png" in pngs, s["files"]
for f in pngs:
    data = open(os.path.join(out, f), "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000, (f, len(data))
assert "loss_lr.png" in open(os.path.join(out, "report.md")).read()
print("report.md, summary.json (%d steps) and %d PNGs: %s" % (steps, len(pngs), ", ".join(pngs)))
PY

# ---- 3. hybrid: host launcher, one container per rank ---------------------------------------------
phase "hybrid: host mpirun, podman run per rank"
# The per-rank command slurm/train.sbatch builds for HT_CONTAINER_RUNTIME=podman.
rank=(podman run --rm --network=host --ipc=host --pid=host --uts=host --user 0:0 --env 'OMPI_*' --env 'PMIX_*'
      --env OMP_NUM_THREADS --env OMPI_MCA_btl_vader_single_copy_mechanism=none -v "$work:$work" -v /tmp:/tmp "$image")
# shellcheck disable=SC2046
"${mpi[@]}" "${rank[@]}" train $(train_args /opt/hpctrain/configs/fmnist_cnn.ini "$work/podman") --run.fresh \
  >"$work/podman.log" 2>&1 || { tail -n 30 "$work/podman.log"; fail "hybrid podman training"; }
same_losses "$work/podman" "host mpirun + podman run per rank"

phase "hybrid: host mpirun, ch-run per rank on a SquashFS image"
# The image's file system as podman stores it (no copy), into SquashFS.
root=$(podman image mount "$image") || fail "podman image mount"
mksquashfs "$root" "$work/hpctrain.sqfs" -quiet -noappend -comp lz4 -wildcards -e 'dev/*' >/dev/null || fail "mksquashfs"
podman image umount "$image" >/dev/null
echo "SquashFS image: $(( $(stat -c %s "$work/hpctrain.sqfs") / 1000000 )) MB"
# Each rank mounts the image itself, at its own mount point (as slurm/train.sbatch does for a
# SquashFS HT_CONTAINER): concurrent ch-run with the default one collide.
# shellcheck disable=SC2016,SC2046
"${mpi[@]}" sh -c 'm=$0-rank$OMPI_COMM_WORLD_RANK; mkdir -p "$m" && exec ch-run -m "$m" "$@"' "/var/tmp/$(basename "$work")" \
  "$work/hpctrain.sqfs" -- hpctrain train $(train_args /opt/hpctrain/configs/fmnist_cnn.ini "$work/charliecloud") --run.fresh \
  >"$work/charliecloud.log" 2>&1 || { tail -n 30 "$work/charliecloud.log"; fail "hybrid ch-run training"; }
same_losses "$work/charliecloud" "host mpirun + ch-run per rank"

# ---- 4. Slurm: sbatch slurm/train.sbatch with HT_CONTAINER, preempted and resumed ------------------
phase "Slurm: sbatch with HT_CONTAINER, USR1 mid-run, requeue, resume in the container"
source "$src/tests/slurm/cluster.sh"
HT_SLURM_TMP=$work ht_slurm_start || { rc=$?; [[ $rc == 77 ]] && skip "Slurm cannot start"; exit $rc; }
trap 'ht_slurm_stop; cleanup' EXIT
sw=$work/slurm
mkdir -p "$sw"
# No hpctrain on the job's PATH or in HT_BIN: only the image's can run.
# shellcheck disable=SC2046
job=$(cd "$sw" && env -u HT_BIN HT_CONTAINER="$image" HT_CONTAINER_MOUNTS="$work" \
        sbatch --parsable --job-name=ctr --ntasks-per-node=2 --gpus-per-node=2 "$src/slurm/train.sbatch" \
        $(train_args /opt/hpctrain/configs/fmnist_cnn.ini "$sw/run")) || fail "sbatch"
job=${job%%;*}
n=0 seen=0
for _ in $(seq 1 900); do
  c=$(podman ps -q --filter "ancestor=$image" | wc -l); (( c > seen )) && seen=$c
  n=$(grep -c '"event":"step"' "$sw/run/metrics.jsonl" 2>/dev/null); n=${n:-0}
  (( n >= 5 )) && break
  sleep 0.2
done
(( n >= 5 && n < 30 )) || ht_slurm_fail "job at $n steps when it should have been at 5..29" "$sw"/*.out
(( seen == 2 )) || ht_slurm_fail "expected 2 rank containers running, saw $seen" "$sw"/*.out
scancel --batch --signal=USR1 "$job" || ht_slurm_fail "scancel --signal=USR1"
echo "sent USR1 to job $job at step $n ($seen rank containers)"
st=$(ht_slurm_wait_state "$job" '^PENDING$' 60) || ht_slurm_fail "job not requeued (state $st)" "$sw"/*.out
ht_slurm_release_requeued "$job"
st=$(ht_slurm_wait_state "$job" '^(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY)$' 180) ||
  ht_slurm_fail "job did not finish (state $st)" "$sw"/*.out
[[ $st == COMPLETED ]] || ht_slurm_fail "job ended $st" "$sw"/*.out
out=$sw/ctr-$job.out
grep -E 'container:|restart|requeueing|exited with' "$out"
grep -q "container: $image via podman" "$out" || ht_slurm_fail "ranks did not run in the container" "$out"
grep -q 'requeueing job' "$out" || ht_slurm_fail "no self-requeue" "$out"
grep -q 'restart 1:' "$out" || ht_slurm_fail "the rerun is not in the job log" "$out"
/usr/bin/python3 - "$sw/run" <<'PY' || ht_slurm_fail "the preempted run did not stop and resume" "$out"
import json, sys
e = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl")]
starts = [x for x in e if x["event"] == "run_start"]
ends = [x["exit_code"] for x in e if x["event"] == "run_end"]
assert len(starts) == 2 and ends == [75, 0], (len(starts), ends)
assert starts[1]["resumed_from_step"] > 0, starts[1]["resumed_from_step"]
print("stopped with 75, resumed from step %d, finished with 0" % starts[1]["resumed_from_step"])
PY
# The losses of the steps after the resume are those of the resumed run (the metrics file appends).
same_losses "$sw/run" "sbatch with HT_CONTAINER, preempted and resumed"
phase "PASS (image $(( size / 1000000 )) MB)"
echo PASS
