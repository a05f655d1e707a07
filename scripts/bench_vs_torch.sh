#!/usr/bin/env bash
# Training throughput on CPU, hpctrain against PyTorch 1.13 (Debian), side by side in one run (issue
# 13 "Measured"): synthetic data, SGD with momentum, the same model, global batch and input size,
# 1 thread per rank.
#   hpctrain:  train.precision fp32 and bf16, on 1 rank and on 2 ranks (the same micro-batch per rank:
#              weak scaling)
#   PyTorch:   fp32, bf16 autocast (NCHW) and bf16 autocast with channels_last, each with its linear
#              layers on OpenBLAS (Debian's libopenblas0-pthread unpacked into a temporary folder and
#              put first on LD_LIBRARY_PATH for these runs only; the system stays as it is) and on the
#              default BLAS (Debian's reference libblas.so.3)
#   peak:      `hpctrain bench peak` (one large oneDNN matmul, bf16 and fp32, 1 thread) in the same run,
#              at the start and at the end (the higher one counts; a busy machine slows either)
# Model FLOP utilisation = training FLOPs per image x images/s / (bf16 peak x ranks), training FLOPs =
# 3 x the forward FLOPs of every convolution and linear layer (2 x multiply-adds, counted by PyTorch
# forward hooks on the same model definition; backward = 2 x forward).
# A configuration that fails (e.g. bf16 in a build without it) is recorded with its error and the
# others go on. Writes results/cpu/precision/bench_vs_torch.json and .csv (OUT_DIR to change).
# usage: scripts/bench_vs_torch.sh [BUILD_DIR]
#   env STEPS, WARMUP (timed and untimed steps, default 20 / 5), MODELS (default "fmnist_cnn
#   resnet18_cifar"), RESNET_BATCH (32), FMNIST_BATCH (128), PRECISIONS (hpctrain's, default
#   "fp32 bf16"), RANKS ("1 2"), OPENBLAS_DIR (an unpacked libopenblas0-pthread instead of apt-get
#   download), OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
HT=$B/hpctrain
STEPS=${STEPS:-20}
WARMUP=${WARMUP:-5}
MODELS=${MODELS:-fmnist_cnn resnet18_cifar}
PRECISIONS=${PRECISIONS:-fp32 bf16}
RANKS=${RANKS:-1 2}
OUT=${OUT_DIR:-results/cpu/precision}
PY=/usr/bin/python3
[[ -x $HT ]] || { echo "bench_vs_torch.sh: $HT not found (build it, or pass the build folder)" >&2; exit 2; }
mkdir -p "$OUT"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
MPI=(mpirun --bind-to none --oversubscribe)
[[ $(id -u) -eq 0 ]] && MPI+=(--allow-run-as-root)
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

# OpenBLAS for PyTorch's linear layers, without installing it.
ob=${OPENBLAS_DIR:-}
if [[ -z $ob ]]; then
  (cd "$tmp" && apt-get download libopenblas0-pthread >"$tmp/apt.log" 2>&1 && dpkg-deb -x libopenblas0-pthread_*.deb "$tmp/openblas") \
    && ob=$tmp/openblas/usr/lib/x86_64-linux-gnu/openblas-pthread
fi
if [[ -n $ob && -f $ob/libblas.so.3 ]]; then
  BLAS_KINDS="openblas default"
else
  echo "bench_vs_torch.sh: no OpenBLAS (apt-get download libopenblas0-pthread failed: $(tail -1 "$tmp/apt.log" 2>/dev/null)); PyTorch on the default BLAS only" >&2
  BLAS_KINDS="default"
fi

# run NAME CMD...: CMD's output in $tmp/NAME.log; a failure leaves $tmp/NAME.err with the last lines.
run() {
  local name=$1; shift
  echo "== $name" >&2
  if ! "$@" >"$tmp/$name.log" 2>&1; then
    tail -3 "$tmp/$name.log" >"$tmp/$name.err"
    echo "   FAILED: $(tail -1 "$tmp/$name.log")" >&2
  fi
}

run peak "$HT" bench peak --size 2048 --reps 10 --out "$tmp/peak.json"
for model in $MODELS; do
  case $model in
    fmnist_cnn) batch=${FMNIST_BATCH:-128}; shape=(1 28 28) ;;
    resnet18_cifar) batch=${RESNET_BATCH:-32}; shape=(3 32 32) ;;
    *) batch=${BATCH:-64}; shape=(3 32 32) ;;
  esac
  syn=(--data.synthetic_channels "${shape[0]}" --data.synthetic_height "${shape[1]}" --data.synthetic_width "${shape[2]}")
  for prec in $PRECISIONS; do
    for np_ in $RANKS; do
      cmd=("$HT" bench train --warmup "$WARMUP" --steps "$STEPS" --out "$tmp/ht_${model}_${prec}_np$np_.json"
           --model.name "$model" --train.global_batch $((batch * np_)) --train.threads 1 --train.device cpu
           --train.precision "$prec" "${syn[@]}")
      if [[ $np_ == 1 ]]; then run "ht_${model}_${prec}_np1" "${cmd[@]}"
      else run "ht_${model}_${prec}_np$np_" "${MPI[@]}" -np "$np_" -x OMP_NUM_THREADS=1 "${cmd[@]}"; fi
    done
  done
  for blas in $BLAS_KINDS; do
    for mode in fp32 bf16 bf16_cl; do
      args=(--model "$model" --batch "$batch" --threads 1 --channels "${shape[0]}" --height "${shape[1]}"
            --width "${shape[2]}" --warmup "$WARMUP" --steps "$STEPS" --out "$tmp/pt_${model}_${mode}_$blas.json")
      [[ $mode != fp32 ]] && args+=(--precision bf16)
      [[ $mode == bf16_cl ]] && args+=(--channels-last)
      if [[ $blas == openblas ]]; then
        run "pt_${model}_${mode}_$blas" env LD_LIBRARY_PATH="$ob${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$PY" scripts/bench_torch.py "${args[@]}"
      else
        run "pt_${model}_${mode}_$blas" "$PY" scripts/bench_torch.py "${args[@]}"
      fi
    done
  done
done

# The peak again at the end: on a shared machine the higher of the two is the better estimate.
run peak_end "$HT" bench peak --size 2048 --reps 10 --out "$tmp/peak_end.json"

"$PY" - "$tmp" "$OUT" "$MODELS" "$PRECISIONS" "$RANKS" "$BLAS_KINDS" "$STEPS" "$WARMUP" <<'PY'
import csv, datetime, json, os, platform, subprocess, sys
tmp, out, models, precs, ranks, blas_kinds, steps, warmup = sys.argv[1:9]
models, precs, ranks, blas_kinds = models.split(), precs.split(), [int(r) for r in ranks.split()], blas_kinds.split()


def load(name):
    p = os.path.join(tmp, name + ".json")
    if os.path.exists(p):
        return json.load(open(p)), None
    e = os.path.join(tmp, name + ".err")
    return None, (open(e).read().strip() if os.path.exists(e) else "no result")


cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
flags = next((l.split(":", 1)[1].split() for l in open("/proc/cpuinfo") if l.startswith("flags")), [])
peak, perr = load("peak")
peak_end, _ = load("peak_end")
if peak and peak_end:
    for t in ("bf16", "fp32"):
        peak[t + "_start"], peak[t + "_end"] = dict(peak[t]), dict(peak_end[t])
        if peak_end[t]["best_gflops"] > peak[t]["best_gflops"]:
            peak[t] = peak_end[t]
bf16_peak = peak["bf16"]["best_gflops"] * 1e9 if peak else None
fp32_peak = peak["fp32"]["best_gflops"] * 1e9 if peak else None
try:
    load1 = open("/proc/loadavg").read().split()[0]
except OSError:
    load1 = "?"
res = {"benchmark": "bench_vs_torch", "command": "scripts/bench_vs_torch.sh",
       "date_utc": datetime.datetime.utcnow().isoformat(timespec="seconds") + "Z",
       "machine": {"cpu": cpu, "cores": os.cpu_count(), "host": platform.node(),
                   "amx": "amx_bf16" in flags, "avx512_bf16": "avx512_bf16" in flags, "load_avg_1min_end": load1},
       "threads_per_rank": 1, "timed_steps": int(steps), "warmup_steps": int(warmup),
       "peak": peak, "peak_error": perr,
       "mfu": "training FLOPs per image (3 x forward conv+linear FLOPs) x images/s / (bf16 matmul peak x ranks)",
       "results": []}
rows = []
for model in models:
    flops = None
    for blas in blas_kinds:
        for mode in ("fp32", "bf16", "bf16_cl"):
            j, _ = load(f"pt_{model}_{mode}_{blas}")
            if j:
                flops = 3 * j["forward_flops_per_image"]
    def add(r):
        ips = r.get("images_per_s")
        n = r.get("ranks", 1)
        r["training_flops_per_image"] = flops
        r["mfu_bf16_peak"] = (flops * ips / (bf16_peak * n)) if (ips and flops and bf16_peak) else None
        r["mfu_fp32_peak"] = (flops * ips / (fp32_peak * n)) if (ips and flops and fp32_peak) else None
        res["results"].append(r)
        rows.append(r)
    for prec in precs:
        for n in ranks:
            j, err = load(f"ht_{model}_{prec}_np{n}")
            r = {"model": model, "framework": "hpctrain", "precision": prec, "layout": "oneDNN", "blas": "",
                 "ranks": n, "global_batch": j["global_batch"] if j else None,
                 "images_per_s": j["images_per_s"] if j else None, "step_ms": j["step_ms"] if j else None,
                 "error": err}
            if j:
                r["step_parts_ms"] = {k: j[k] for k in ("data_ms", "forward_ms", "backward_ms", "allreduce_ms", "optimizer_ms")}
            add(r)
    for blas in blas_kinds:
        for mode in ("fp32", "bf16", "bf16_cl"):
            j, err = load(f"pt_{model}_{mode}_{blas}")
            add({"model": model, "framework": j["framework"] if j else "pytorch",
                 "precision": "fp32" if mode == "fp32" else "bf16 autocast",
                 "layout": "channels_last" if mode == "bf16_cl" else "NCHW", "blas": blas, "ranks": 1,
                 "global_batch": j["batch"] if j else None, "images_per_s": j["images_per_s"] if j else None,
                 "step_ms": j["step_ms"] if j else None, "blas_loaded": j.get("blas") if j else None, "error": err})
    # Ratios against PyTorch's best bf16 mode and hpctrain fp32, 1 rank (the issue's goals).
    pt_bf16 = [r["images_per_s"] for r in rows if r["model"] == model and r["framework"] != "hpctrain"
               and r["precision"] != "fp32" and r["images_per_s"]]
    ht = {r["precision"]: r["images_per_s"] for r in rows
          if r["model"] == model and r["framework"] == "hpctrain" and r["ranks"] == 1}
    res.setdefault("goals", {})[model] = {
        "hpctrain_bf16_over_best_pytorch_bf16": (ht["bf16"] / max(pt_bf16)) if ht.get("bf16") and pt_bf16 else None,
        "hpctrain_bf16_over_hpctrain_fp32": (ht["bf16"] / ht["fp32"]) if ht.get("bf16") and ht.get("fp32") else None}
    for prec in precs:
        one = ht.get(prec)
        two = next((r["images_per_s"] for r in rows if r["model"] == model and r["framework"] == "hpctrain"
                    and r["precision"] == prec and r["ranks"] == 2 and r["images_per_s"]), None)
        if one and two:
            res["goals"][model][f"weak_scaling_efficiency_{prec}_2_ranks"] = two / (2 * one)

over = [r for r in rows if (r.get("mfu_bf16_peak") or 0) > 1]
if over:
    res["warning"] = ("%d result(s) above 100 %% of the measured bf16 peak: the peak runs were slowed "
                      "(a busy machine); the MFU figures of this run are not reliable" % len(over))
    print("warning:", res["warning"])
json.dump(res, open(os.path.join(out, "bench_vs_torch.json"), "w"), indent=2)
cols = ["model", "framework", "precision", "layout", "blas", "ranks", "global_batch", "images_per_s", "step_ms",
        "training_flops_per_image", "mfu_bf16_peak", "mfu_fp32_peak", "error"]
with open(os.path.join(out, "bench_vs_torch.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("%.6g" % v if isinstance(v, float) else ("" if v is None else v)) for k, v in ((k, r.get(k)) for k in cols)})
if peak:
    print(f"peak (1 thread, oneDNN matmul {peak['size']}^3, ISA {peak['isa']}): bf16 {peak['bf16']['best_gflops']:.1f} GFLOP/s, "
          f"fp32 {peak['fp32']['best_gflops']:.1f} GFLOP/s")
print(f"{'model':15s} {'framework':18s} {'precision':14s} {'layout':13s} {'blas':8s} ranks  images/s   MFU(bf16 peak)")
for r in rows:
    ips = "%9.1f" % r["images_per_s"] if r["images_per_s"] else "   failed"
    mfu = "%6.1f %%" % (100 * r["mfu_bf16_peak"]) if r.get("mfu_bf16_peak") else ""
    print(f"{r['model']:15s} {r['framework']:18s} {r['precision']:14s} {r['layout']:13s} {r['blas']:8s} {r['ranks']:5d} {ips}   {mfu}")
for m, g in res["goals"].items():
    print(m, {k: round(v, 3) for k, v in g.items() if v is not None})
print("wrote", os.path.join(out, "bench_vs_torch.json"), "and .csv")
PY
