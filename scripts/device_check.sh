#!/usr/bin/env bash
# One prepared run on the single-GPU verification machine (NVIDIA H200, x86-64, no internet, no apt;
# nvcc 13.0, CMake, ninja, gcc, Python 3.12 + PyTorch with cuDNN/NCCL/cuBLAS wheels). Within about 8
# minutes it: unpacks .device_deps/deps.tar.xz (scripts/pack_device_deps.sh, run beforehand on a
# Debian machine), points the build at it and at PyTorch's cuDNN/NCCL, builds hpctrain for sm_90,
# runs `ctest -L gpu`, trains resnet18_cifar on synthetic data for 300 steps on 1 GPU, writes
# device_check.json (to $OUT when set, and to results/h200/) and prints a short table last.
#
# Environment: OUT (result folder, default results/h200), HT_DEVICE_STEPS (default 300),
# HT_DEVICE_CPU_ONLY=1 (configure and build without CUDA: tests this script's setup on a machine
# without a GPU; skips the GPU steps), HT_DEVICE_SKIP_BUILD=1 (reuse build-device).
set -uo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s)
SRC=$PWD
RES=${OUT:-$SRC/results/h200}
mkdir -p "$RES" "$SRC/results/h200"
LOG="$RES/device_check.log"
: > "$LOG"
STEPS=${HT_DEVICE_STEPS:-300}
CPU_ONLY=${HT_DEVICE_CPU_ONLY:-0}
BUILD=$SRC/build-device
DEPS=$SRC/.device_deps
ROOT=$DEPS/root
declare -A R  # results: key -> value (JSON-ready strings)
status() { R[$1]=$2; echo "device_check: $1 = $2" | tee -a "$LOG"; }
elapsed() { echo $(( $(date +%s) - T0 )); }

# ---- 1. dependencies ----------------------------------------------------------------------------
if [[ ! -d "$ROOT/usr" ]]; then
  if [[ ! -f "$DEPS/deps.tar.xz" ]]; then
    echo "device_check: $DEPS/deps.tar.xz is missing: run scripts/pack_device_deps.sh on a Debian machine first" >&2
    exit 2
  fi
  mkdir -p "$ROOT" && tar -C "$ROOT" -xJf "$DEPS/deps.tar.xz"
fi
LIBDIR=$ROOT/usr/lib/x86_64-linux-gnu
# Expose only the shared libraries this machine does not already have (by soname), so the Debian
# copies never shadow the system's own (cmake, python and the driver keep theirs).
SHIM=$DEPS/shim
rm -rf "$SHIM" && mkdir -p "$SHIM"
have=$(ldconfig -p 2>/dev/null | awk '{print $1}' | sort -u)
for so in $(find "$LIBDIR" "$LIBDIR/hdf5/serial" -maxdepth 1 -name 'lib*.so.*' 2>/dev/null); do
  name=$(basename "$so")
  soname=$(readelf -d "$so" 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
  [[ -z "$soname" ]] && soname=$name
  if ! grep -qx "$soname" <<<"$have" && [[ ! -e "$SHIM/$soname" ]]; then ln -s "$so" "$SHIM/$soname"; fi
done
# Development links (libfoo.so) for the linker.
for so in $(find "$LIBDIR" -maxdepth 1 -name 'lib*.so' 2>/dev/null); do
  [[ -e "$SHIM/$(basename "$so")" ]] || ln -s "$so" "$SHIM/$(basename "$so")"
done
status shim_libraries "$(ls "$SHIM" | wc -l)"

export OPAL_PREFIX=$ROOT/usr            # relocated Open MPI finds its components and help files
export PATH=$ROOT/usr/bin:$PATH
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_pml=ob1 OMPI_MCA_osc=^ucx
LDP=$SHIM

# cuDNN and NCCL from PyTorch's wheels (site-packages/nvidia/*), cuBLAS from the toolkit (or wheel).
CMAKE_CUDA_ARGS=()
if [[ "$CPU_ONLY" != 1 ]]; then
  PY=$(command -v python3)
  NVROOTS=$("$PY" - <<'PYEOF' 2>/dev/null
import os
roots = set()
try:
    import nvidia
    roots.update(os.path.abspath(p) for p in nvidia.__path__)
except Exception:
    pass
try:
    import torch
    roots.add(os.path.join(os.path.dirname(torch.__file__), "lib"))
except Exception:
    pass
print(" ".join(sorted(roots)))
PYEOF
)
  status nvidia_wheel_roots "${NVROOTS:-none}"
  findone() { find $NVROOTS /usr/local/cuda /usr/lib/x86_64-linux-gnu -name "$1" 2>/dev/null | sort | head -1; }
  CUDNN_H=$(findone cudnn.h); NCCL_H=$(findone nccl.h)
  CUDNN_SO=$(findone 'libcudnn.so.[0-9]*'); [[ -z "$CUDNN_SO" ]] && CUDNN_SO=$(findone 'libcudnn.so')
  NCCL_SO=$(findone 'libnccl.so.[0-9]*'); [[ -z "$NCCL_SO" ]] && NCCL_SO=$(findone 'libnccl.so')
  status cudnn "$CUDNN_SO"
  status nccl "$NCCL_SO"
  if [[ -z "$CUDNN_H" || -z "$CUDNN_SO" || -z "$NCCL_H" || -z "$NCCL_SO" ]]; then
    echo "device_check: cuDNN or NCCL not found (headers: '$CUDNN_H' '$NCCL_H')" >&2
  fi
  for lib in "$CUDNN_SO" "$NCCL_SO"; do [[ -n "$lib" ]] && LDP="$LDP:$(dirname "$lib")"; done
  # cuBLAS: the toolkit's, else the wheel's.
  if ! ls /usr/local/cuda/lib64/libcublas.so* >/dev/null 2>&1; then
    CUBLAS_SO=$(findone 'libcublas.so.[0-9]*'); [[ -n "$CUBLAS_SO" ]] && LDP="$LDP:$(dirname "$CUBLAS_SO")"
  fi
  CMAKE_CUDA_ARGS=(-DHT_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc
    -DCUDNN_INCLUDE_DIR="$(dirname "$CUDNN_H")" -DCUDNN_LIBRARY="$CUDNN_SO"
    -DNCCL_INCLUDE_DIR="$(dirname "$NCCL_H")" -DNCCL_LIBRARY="$NCCL_SO")
else
  CMAKE_CUDA_ARGS=(-DHT_ENABLE_CUDA=OFF)
fi
export LD_LIBRARY_PATH=$LDP${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
RPATH_LINK=$(tr ':' '\n' <<<"$LDP" | sed 's/^/-Wl,-rpath-link,/' | tr '\n' ' ')

# ---- 2. configure and build ---------------------------------------------------------------------
if [[ "${HT_DEVICE_SKIP_BUILD:-0}" != 1 ]]; then
  cmake -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$ROOT/usr;$LIBDIR/cmake" \
    -DCMAKE_SYSTEM_IGNORE_PREFIX_PATH="${HT_DEVICE_IGNORE_PREFIX:-}" \
    -DMPI_C_COMPILER="$ROOT/usr/bin/mpicc.openmpi" -DMPI_CXX_COMPILER="$ROOT/usr/bin/mpicxx.openmpi" \
    -DMPIEXEC_EXECUTABLE="$ROOT/usr/bin/mpirun.openmpi" \
    -DHDF5_ROOT="$LIBDIR/hdf5/serial" -DHDF5_PREFER_PARALLEL=OFF \
    -DBoost_DIR="$LIBDIR/cmake/Boost-1.74.0" -Ddnnl_DIR="$LIBDIR/cmake/dnnl" \
    -DOpenCL_INCLUDE_DIR="$ROOT/usr/include" -DOpenCL_LIBRARY="$LIBDIR/libOpenCL.so.1" \
    -DCatch2_DIR="$ROOT/usr/lib/cmake/Catch2" -Dnlohmann_json_DIR="$ROOT/usr/share/cmake/nlohmann_json" \
    -DZLIB_INCLUDE_DIR="$ROOT/usr/include" \
    -DCMAKE_EXE_LINKER_FLAGS="$RPATH_LINK" "${CMAKE_CUDA_ARGS[@]}" >>"$LOG" 2>&1
  rc=$?
  status configure_rc $rc
  if (( rc != 0 )); then tail -40 "$LOG"; fi
  targets=(hpctrain)
  [[ "$CPU_ONLY" != 1 ]] && targets+=(ht_gpu_tests)
  timeout 330 cmake --build "$BUILD" -j "$(nproc)" --target "${targets[@]}" >>"$LOG" 2>&1
  rc=$?
  status build_rc $rc
  status build_done_at_s "$(elapsed)"
  if (( rc != 0 )); then grep -E "error|FAILED" "$LOG" | head -30; fi
fi

# ---- 3. GPU tests ------------------------------------------------------------------------------
if [[ "$CPU_ONLY" != 1 && -x "$BUILD/tests/ht_gpu_tests" ]]; then
  (cd "$BUILD" && timeout 150 ctest -L gpu --output-on-failure) > "$RES/ctest_gpu.log" 2>&1
  status ctest_gpu_rc $?
  status ctest_gpu_summary "$(grep -E 'tests passed|tests failed' "$RES/ctest_gpu.log" | tail -1)"
  tail -30 "$RES/ctest_gpu.log"
fi

# ---- 4. training: ResNet-18 (CIFAR variant) on synthetic data, 1 GPU ---------------------------
if [[ -x "$BUILD/hpctrain" ]]; then
  "$BUILD/hpctrain" doctor > "$RES/doctor.txt" 2>&1
  status doctor_rc $?
fi
if [[ "$CPU_ONLY" != 1 && -x "$BUILD/hpctrain" ]]; then
  RUN=$(mktemp -d /tmp/ht-device-run.XXXXXX)
  left=$(( 470 - $(elapsed) ))
  (( left < 60 )) && left=60
  timeout "$left" "$BUILD/hpctrain" train --config configs/resnet18_cifar10.ini --data.synthetic true \
    --train.device cuda --train.max_steps "$STEPS" --train.eval false --run.dir "$RUN" > "$RES/train.log" 2>&1
  status train_rc $?
  tail -15 "$RES/train.log"
  if [[ -f "$RUN/metrics.jsonl" ]]; then
    cp "$RUN/metrics.jsonl" "$RES/train_metrics.jsonl"
    python3 - "$RUN/metrics.jsonl" > "$RES/train_summary.txt" <<'PYEOF'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"step"' in l]
steps = [s for s in steps if s.get("event") == "step"]
if not steps:
    print("steps=0"); sys.exit()
tail = steps[len(steps)//2:] or steps
ips = sorted(s.get("images_per_s", 0) for s in tail)
ms = sorted(s.get("step_ms", 0) for s in tail)
print(f"steps={steps[-1].get('step')} first_loss={steps[0].get('loss')} last_loss={steps[-1].get('loss')} "
      f"median_images_per_s={ips[len(ips)//2]:.1f} median_step_ms={ms[len(ms)//2]:.2f} "
      f"gpu_mem_bytes={steps[-1].get('gpu_memory_used_bytes', steps[-1].get('gpu_mem_used_bytes', 'n/a'))}")
PYEOF
    status train_summary "$(cat "$RES/train_summary.txt")"
  fi
fi

# ---- 5. results -------------------------------------------------------------------------------
status total_s "$(elapsed)"
status gpu "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
{
  echo "{"
  first=1
  for k in "${!R[@]}"; do
    v=${R[$k]//\\/\\\\}; v=${v//\"/\\\"}
    (( first )) || echo ","
    printf '  "%s": "%s"' "$k" "$v"
    first=0
  done
  echo
  echo "}"
} > "$RES/device_check.json"
[[ "$RES" != "$SRC/results/h200" ]] && cp "$RES/device_check.json" "$SRC/results/h200/" 2>/dev/null
echo
echo "==== hpctrain device check ($(date -u +%FT%TZ)) ===="
for k in gpu configure_rc build_rc build_done_at_s ctest_gpu_rc ctest_gpu_summary doctor_rc train_rc train_summary total_s; do
  printf '%-18s %s\n' "$k" "${R[$k]:-n/a}"
done
