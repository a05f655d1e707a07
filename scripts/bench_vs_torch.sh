#!/usr/bin/env bash
# Training throughput on CPU, hpctrain against PyTorch 1.13 (Debian) in one run: the same model,
# global batch, input size and thread count (1 thread), synthetic data; then hpctrain with 1 and 2
# ranks (one thread each) for the weak-scaling efficiency. Writes results/cpu/bench_train.json.
# usage: scripts/bench_vs_torch.sh [BUILD_DIR]   (env STEPS, WARMUP)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
HT=$B/hpctrain
STEPS=${STEPS:-20}
WARMUP=${WARMUP:-5}
OUT=results/cpu
mkdir -p "$OUT"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
MPI=(mpirun --bind-to none --oversubscribe)
[[ $(id -u) -eq 0 ]] && MPI+=(--allow-run-as-root)

bench() {  # name model batch c h w
  local name=$1 model=$2 batch=$3 c=$4 h=$5 w=$6
  OMP_NUM_THREADS=1 "$HT" bench train --warmup "$WARMUP" --steps "$STEPS" --out "$tmp/ht_$name.json" \
    --model.name "$model" --train.global_batch "$batch" --train.threads 1 --train.device cpu \
    --data.synthetic_channels "$c" --data.synthetic_height "$h" --data.synthetic_width "$w" >/dev/null
  OMP_NUM_THREADS=1 /usr/bin/python3 scripts/bench_torch.py --model "$model" --batch "$batch" --threads 1 \
    --channels "$c" --height "$h" --width "$w" --warmup "$WARMUP" --steps "$STEPS" --out "$tmp/pt_$name.json" >/dev/null
  # Weak scaling: the same micro-batch per rank on 2 ranks (global batch doubles).
  "${MPI[@]}" -np 2 -x OMP_NUM_THREADS=1 "$HT" bench train --warmup "$WARMUP" --steps "$STEPS" \
    --out "$tmp/ht2_$name.json" --model.name "$model" --train.global_batch $((batch * 2)) --train.threads 1 \
    --train.device cpu --data.synthetic_channels "$c" --data.synthetic_height "$h" --data.synthetic_width "$w" >/dev/null
}

bench fmnist_cnn fmnist_cnn 128 1 28 28
bench resnet18_cifar resnet18_cifar "${RESNET_BATCH:-32}" 3 32 32

/usr/bin/python3 - "$tmp" "$OUT/bench_train.json" <<'PY'
import json, os, platform, subprocess, sys, datetime
tmp, out = sys.argv[1], sys.argv[2]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
res = {"machine": {"cpu": cpu, "cores": os.cpu_count(), "host": platform.node()},
       "date": datetime.datetime.utcnow().isoformat(timespec="seconds") + "Z",
       "command": "scripts/bench_vs_torch.sh", "threads_per_rank": 1, "results": []}
for name in ("fmnist_cnn", "resnet18_cifar"):
    ht = json.load(open(f"{tmp}/ht_{name}.json"))
    pt = json.load(open(f"{tmp}/pt_{name}.json"))
    ht2 = json.load(open(f"{tmp}/ht2_{name}.json"))
    r = {"model": name, "global_batch": ht["global_batch"],
         "hpctrain_images_per_s": ht["images_per_s"], "pytorch_images_per_s": pt["images_per_s"],
         "ratio_hpctrain_over_pytorch": ht["images_per_s"] / pt["images_per_s"],
         "hpctrain_step_parts_ms": {k: ht[k] for k in ("data_ms", "forward_ms", "backward_ms", "allreduce_ms", "optimizer_ms")},
         "weak_scaling": {"np1_images_per_s": ht["images_per_s"], "np2_images_per_s": ht2["images_per_s"],
                          "efficiency": ht2["images_per_s"] / (2 * ht["images_per_s"])},
         "pytorch": pt["framework"]}
    res["results"].append(r)
    print(f"{name:15s} hpctrain {r['hpctrain_images_per_s']:8.1f} img/s  pytorch {r['pytorch_images_per_s']:8.1f} img/s"
          f"  ratio {r['ratio_hpctrain_over_pytorch']:.2f}  weak-scaling eff (2 ranks) {r['weak_scaling']['efficiency']:.2f}")
json.dump(res, open(out, "w"), indent=2)
print("wrote", out)
PY
