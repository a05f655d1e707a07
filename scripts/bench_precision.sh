#!/usr/bin/env bash
# hpctrain fp32 against bf16 on the CPU, 1 thread, synthetic data, alternating the two precisions
# REPEATS times in one run so both see the same machine load. Writes one JSON per run (bench train
# --out) and bench_precision.json with the machine (CPU model, oneDNN ISA, load average) and the commands.
# Usage: scripts/bench_precision.sh [OUT_DIR] (default results/cpu/precision). Env: BUILD_DIR (build),
# REPEATS (2), MODELS ("resnet18_cifar:32:32:3 fmnist_cnn:128:28:1" = name:batch:size:channels).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-results/cpu/precision}
HT=${BUILD_DIR:-build}/hpctrain
REPEATS=${REPEATS:-2}
MODELS=${MODELS:-"resnet18_cifar:32:32:3 fmnist_cnn:128:28:1"}
mkdir -p "$OUT"
runs=()
for m in $MODELS; do
  IFS=: read -r name batch size ch <<<"$m"
  for r in $(seq 1 "$REPEATS"); do
    for p in fp32 bf16; do
      f="$OUT/${name}_b${batch}_${p}_t1_r${r}.json"
      cmd=(env OMP_NUM_THREADS=1 "$HT" bench train --warmup 3 --steps 10 --out "$f" --model.name "$name"
           --train.global_batch "$batch" --train.precision "$p" --train.device cpu --train.threads 1
           --data.synthetic_height "$size" --data.synthetic_width "$size" --data.synthetic_channels "$ch")
      echo "${cmd[*]}"
      "${cmd[@]}" | tail -1
      runs+=("$f|${cmd[*]}|$(cut -d' ' -f1-3 /proc/loadavg)")
    done
  done
done
/usr/bin/python3 - "$OUT" "${runs[@]}" <<'PY'
import json, platform, subprocess, sys
out, runs = sys.argv[1], sys.argv[2:]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
rows = []
for r in runs:
    f, cmd, load = r.split("|")
    j = json.load(open(f))
    rows.append({"file": f, "command": cmd, "loadavg_1_5_15": load,
                 "images_per_s": j.get("images_per_s"), "step_ms": j.get("step_ms"),
                 "forward_ms": j.get("forward_ms"), "backward_ms": j.get("backward_ms")})
summary = {"machine": {"cpu": cpu, "cores": subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip(),
                       "kernel": platform.release()}, "runs": rows}
json.dump(summary, open(f"{out}/bench_precision.json", "w"), indent=1)
for r in rows:
    print(f"{r['images_per_s']:10.1f} img/s  load {r['loadavg_1_5_15']}  {r['file']}")
PY
