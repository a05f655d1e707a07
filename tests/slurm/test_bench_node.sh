#!/usr/bin/env bash
# slurm/bench_node.sbatch on CPU in a real (single-node) Slurm: `sbatch --wait` on 2 tasks writes
# node.json, allreduce-n2.json (no wrong element), io.json (entries for 1 and 2 ranks) and
# train-{weak,strong}-n{1,2}.json (positive throughput, the asked world size and batch) into
# results/<cluster>/<date>-<jobid>/; then slurm/scaling.sh --wait runs a one-point sweep and its
# collector job runs scripts/scaling_study.py over it (CSV and plots). Exit 77 when Slurm cannot start.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/cluster.sh"
ht_slurm_test_begin || exit $?
fail() { ht_slurm_fail "$*" "$work"/*.out "$work"/results/*/*/bench.log "$work"/sweep/*.out; }
py=/usr/bin/python3

# A small prepared dataset for the I/O part (Debian's Fashion-MNIST, 2 train shards).
ht_slurm_prepare_fmnist || fail "hpctrain prepare"

export HT_BIN OMP_NUM_THREADS=1 HT_BENCH_STEPS=4 HT_BENCH_WARMUP=1 HT_BENCH_BATCH_PER_RANK=16
export HT_BENCH_AR_ARGS="--max-bytes 1M --iters 3 --warmup 1 --bucket-mb 0.25"
# The gradient wire in bf16 (HT_BENCH_GRAD_DTYPE): passed to bench allreduce and bench train.
export HT_BENCH_GRAD_DTYPE=bf16
id=$(cd "$work" && sbatch --parsable --wait --ntasks-per-node=2 --gpus-per-node=2 \
       "$src/slurm/bench_node.sbatch" --results "$work/results" --cluster testcluster --data "$work/fmnist")
rc=$?
id=${id%%;*}
echo "bench_node job $id exited $rc"
[[ $rc == 0 ]] || fail "sbatch --wait bench_node.sbatch exited $rc"
out=$(ls -d "$work/results/testcluster/"*-"$id" 2>/dev/null)
[[ -d $out ]] || fail "no results/testcluster/<date>-$id folder"
[[ $(basename "$out") =~ ^[0-9]{8}-$id$ ]] || fail "folder name $(basename "$out") is not <date>-<jobid>"
ls -l "$out"
for f in node.json allreduce-n2.json io.json train-weak-n1.json train-weak-n2.json train-strong-n1.json train-strong-n2.json; do
  [[ -s $out/$f ]] || fail "$f missing"
done

"$py" - "$out" <<'EOF' || fail "result files do not hold what they should"
import json, os, sys
d = sys.argv[1]
ld = lambda f: json.load(open(os.path.join(d, f)))
node = ld("node.json")
assert node["ntasks"] == 2 and node["device"] == "cpu" and node["ranks"] == [1, 2], node
assert node["precision"] == "fp32" and node["grad_dtype"] == "bf16", node
ar = ld("allreduce-n2.json")
assert ar["benchmark"] == "allreduce" and ar["world_size"] == 2 and ar["wrong_total"] == 0, ar
assert ar["grad_dtype"] == "bf16" and ar["bytes_per_element"] == 2, ar
sizes = [r["bytes"] for r in ar["results"] if r["path"] != "bucketer"]
assert min(sizes) == 8 and max(sizes) == 1 << 20, sizes
assert all(r["busbw_GBps"] > 0 for r in ar["results"]), ar["results"]
io = ld("io.json")
print("io.json keys:", list(io) if isinstance(io, dict) else type(io))
text = json.dumps(io)
assert '"world_size": 1' in text and '"world_size": 2' in text, "io.json lacks an entry per world size"
for mode, n, gb in (("weak", 1, 16), ("weak", 2, 32), ("strong", 1, 32), ("strong", 2, 32)):
    t = ld("train-%s-n%d.json" % (mode, n))
    assert t["benchmark"] == "train" and t["world_size"] == n and t["global_batch"] == gb, t
    assert t["images_per_s"] > 0 and t["step_ms"] > 0 and t["timed_steps"] == 4, t
    assert t["precision"] == "fp32" and t["grad_dtype"] == "bf16", t
    print("train %-6s n=%d: %.1f images/s, step %.2f ms" % (mode, n, t["images_per_s"], t["step_ms"]))
EOF

# Sweep over node counts (one here), collected by the dependent job into a study.
(cd "$work" && "$src/slurm/scaling.sh" --nodes 1 --gpus-per-node 2 --batch-per-gpu 16 \
   --results "$work/sweep" --cluster testcluster --wait) || fail "scaling.sh --wait"
for f in study/scaling.csv study/throughput.png study/efficiency.png study/breakdown.png study/cost.txt n1/train-weak-n2.json; do
  [[ -s $work/sweep/$f ]] || fail "sweep: $f missing"
done
grep -q '^measured,weak,cpu,2,' "$work/sweep/study/scaling.csv" || fail "sweep: no measured weak point at 2 ranks"
echo "PASS"
