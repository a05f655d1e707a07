#!/usr/bin/env bash
# One prepared run on the single-GPU verification machine (NVIDIA H200, x86-64, no internet, no apt;
# nvcc 13.0, CMake, ninja, gcc, Python 3.12 + PyTorch with cuDNN/NCCL/cuBLAS wheels). Within about 8
# minutes it: unpacks .device_deps/deps.tar.xz (scripts/pack_device_deps.sh, run beforehand on a
# Debian machine; the file is git-ignored, so the device tool must carry it: carry
# `.device_deps/deps.tar.xz` only, as the unpacked tree is about 246 MiB and the device tool takes
# 64 MiB; without the tarball the script refuses to start and says so), points the
# build at it and at cuDNN/NCCL (toolkit or PyTorch's wheels), builds hpctrain for sm_90, checks the
# binary's libraries and a 2-rank mpirun, runs the `ctest -L gpu` tests one by one under time limits,
# runs `hpctrain doctor`, trains resnet18_cifar on synthetic data for 300 steps on 1 GPU, then
# measures `hpctrain bench train` for resnet18_cifar at fp32/bf16/fp16 and batch 128/512 and the
# PyTorch counterparts (scripts/bench_torch_gpu.py: eager fp32, eager bf16 autocast + channels_last,
# torch.compile of it, eager fp16 autocast + channels_last), writes device_check.json,
# bench_train_gpu.json and logs to $OUT (default results/h200) and prints a short table last.
# Rehearsed end to end in a Debian trixie chroot without GPU: results/h200/REHEARSAL.md.
#
# Environment: OUT (result folder, default results/h200), HT_DEVICE_STEPS (default 300),
# HT_DEVICE_CPU_ONLY=1 (configure and build without CUDA: tests this script's setup on a machine
# without a GPU; the GPU phases are then recorded as not run), HT_DEVICE_SKIP_BUILD=1 (reuse the build
# folder), HT_DEVICE_BUILD_DIR (default build-device), HT_DEVICE_DEPS_DIR (default .device_deps).
#
# Time: the device tool stops a command at 600 s. Every phase has its own limit and the script has a
# deadline of HT_DEVICE_TOTAL (default 480 s) from its start: a phase runs under the smaller of its
# limit and the time left, and a phase (or GPU test) without enough time left is recorded as not run.
# Phase limits (s): deps 30, configure 40, build 140 (HT_DEVICE_BUILD_TIMEOUT; about 40-80 s on its 16
# cores by results/h200/REHEARSAL.md), mpirun 25, GPU tests 240 in all (28 tests: the unit tests in 17
# areas, each its own process, and the training checks, which skip their own GPU probe once a GPU
# test has passed) and 60 each
# (HT_DEVICE_CTEST_BUDGET / HT_DEVICE_CTEST_PER_TEST), doctor 20, training 45, our benchmark 70 (6
# runs of 25 steps, 20 s each at most; HT_DEVICE_BENCH_LIMIT), PyTorch's 90 (HT_DEVICE_TORCH_LIMIT;
# one process, torch.compile's compilation included). The limits add up to more than the 480 s
# deadline on purpose: the phases expected to take less (deps ~10, configure ~15, build ~70, GPU
# tests ~150) leave the later ones their time, and whatever the deadline cuts off is recorded as not
# run; 480 s leaves 120 s of the command limit for the script's own work and the transfers.
#
# Two verdicts: device_check.json is rewritten after every phase (so a command stopped at its limit
# still returns what was verified). "verdict" is correctness: "unverified" lists every phase or test
# that failed, timed out or was not run, by name (an hpctrain benchmark that fails on its own
# included). "comparison_verdict" is the throughput comparison with PyTorch: "uncompared" lists each
# figure cut off by the time limit or missing on PyTorch's side; it never turns correctness into
# "not verified". The exit status is 0 only when correctness is verified; else 1, after a line
# "device_check: NOT VERIFIED: ..." naming each item. A GPU test passes only when ctest ran it and
# reported it passed (a skip, a timeout, no time left or a missing test is a failure).
set -uo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s)
SRC=$PWD
RES=${OUT:-$SRC/results/h200}
mkdir -p "$RES"
LOG="$RES/device_check.log"
# Time limits (s); see the header. Their sum stays well under the device tool's 600 s.
DEPS_LIMIT=30
CONFIGURE_LIMIT=40
BUILD_LIMIT=${HT_DEVICE_BUILD_TIMEOUT:-140}
MPI_LIMIT=25
CTEST_BUDGET=${HT_DEVICE_CTEST_BUDGET:-240}
CTEST_PER_TEST=${HT_DEVICE_CTEST_PER_TEST:-60}
DOCTOR_LIMIT=20
TRAIN_LIMIT=45
BENCH_LIMIT=${HT_DEVICE_BENCH_LIMIT:-70}
TORCH_LIMIT=${HT_DEVICE_TORCH_LIMIT:-90}
TOTAL_LIMIT=${HT_DEVICE_TOTAL:-480}
: > "$LOG"
STEPS=${HT_DEVICE_STEPS:-300}
CPU_ONLY=${HT_DEVICE_CPU_ONLY:-0}
BUILD=${HT_DEVICE_BUILD_DIR:-$SRC/build-device}
DEPS=${HT_DEVICE_DEPS_DIR:-$SRC/.device_deps}
ROOT=$DEPS/root
declare -A R  # results: key -> value (JSON-ready strings)
UNVERIFIED=()  # every item that failed, timed out or was not run, with the reason (correctness)
UNCOMPARED=()  # every throughput figure of the comparison with PyTorch that is missing, with the reason
# The helpers (status, limit_for, limited, why, unverified, jstr, write_json, finish).
# shellcheck source=scripts/device_check_lib.sh
source "$SRC/scripts/device_check_lib.sh"
# Cores for the build: GNU nproc obeys OMP_NUM_THREADS (often 1 in PyTorch images), so drop it.
CORES=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
# Everything below is also appended to $LOG; the stdout tail alone (12,000 characters) should be
# enough to see what failed, so each phase prints its own short verdict.
{
  echo "device_check: start $(date -u +%FT%TZ) on $(uname -srm), $CORES cores (OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset}), user $(id -un), in $SRC"
  echo "device_check: tools: cmake=$(command -v cmake) $(cmake --version 2>/dev/null | head -1 | awk '{print $3}')," \
       "ninja=$(command -v ninja) $(ninja --version 2>/dev/null), c++=$(c++ -dumpfullversion 2>/dev/null)," \
       "python3=$(command -v python3) $(python3 -c 'import sys; print(sys.version.split()[0])' 2>/dev/null)," \
       "nvcc=$(/usr/local/cuda/bin/nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')," \
       "glibc=$(ldd --version 2>/dev/null | head -1 | awk '{print $NF}')"
  echo "device_check: driver: $(head -1 /proc/driver/nvidia/version 2>/dev/null || echo 'no /proc/driver/nvidia/version');" \
       "nvidia-smi: $(if command -v nvidia-smi >/dev/null; then nvidia-smi -L 2>&1 | head -4 | tr '\n' ' '; else echo absent; fi)"
} 2>&1 | tee -a "$LOG"
if commit=$(git -C "$SRC" rev-parse --short HEAD 2>/dev/null); then
  git -C "$SRC" diff --quiet HEAD 2>/dev/null || commit+=" (modified)"
else
  commit="unknown (no git repository or no git here; HT_DEVICE_NOTE can name it)"
fi
status commit "$commit"
[[ -n "${HT_DEVICE_NOTE:-}" ]] && status note "$HT_DEVICE_NOTE"
for tool in cmake ninja; do
  command -v "$tool" >/dev/null || echo "device_check: $tool is not on PATH: the build will fail" | tee -a "$LOG"
done

# ---- 1. dependencies: scripts/device_check_deps.sh ----------------------------------------------
# shellcheck source=scripts/device_check_deps.sh
source "$SRC/scripts/device_check_deps.sh"

# ---- 2. configure and build ---------------------------------------------------------------------
# The script tests (gpu_train_*) run under /usr/bin/python3 (stdlib only); else PATH's python3.
HT_PY=/usr/bin/python3
[[ -x "$HT_PY" ]] || HT_PY=$(command -v python3)
if [[ "${HT_DEVICE_SKIP_BUILD:-0}" != 1 ]]; then
  limited "$(limit_for $CONFIGURE_LIMIT)" cmake -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$ROOT/usr;$LIBDIR/cmake" \
    -DCMAKE_SYSTEM_IGNORE_PREFIX_PATH="${HT_DEVICE_IGNORE_PREFIX:-}" \
    -DMPI_C_COMPILER="$ROOT/usr/bin/mpicc.openmpi" -DMPI_CXX_COMPILER="$ROOT/usr/bin/mpicxx.openmpi" \
    -DMPIEXEC_EXECUTABLE="$ROOT/usr/bin/mpirun.openmpi" \
    -DHDF5_ROOT="$LIBDIR/hdf5/serial" -DHDF5_PREFER_PARALLEL=OFF \
    -DBoost_DIR="$LIBDIR/cmake/Boost-1.74.0" -Ddnnl_DIR="$LIBDIR/cmake/dnnl" \
    -DOpenCL_INCLUDE_DIR="$ROOT/usr/include" -DOpenCL_LIBRARY="$LIBDIR/libOpenCL.so.1" \
    -DCatch2_DIR="$ROOT/usr/lib/cmake/Catch2" -Dnlohmann_json_DIR="$ROOT/usr/share/cmake/nlohmann_json" \
    -DZLIB_INCLUDE_DIR="$ROOT/usr/include" -DHT_PYTHON="$HT_PY" \
    -DCMAKE_EXE_LINKER_FLAGS="$RPATH_LINK" "${CMAKE_CUDA_ARGS[@]}" >>"$LOG" 2>&1
  rc=$?
  status configure_rc $rc
  if (( rc != 0 )); then tail -40 "$LOG"; unverified configure "cmake: $(why $rc)"; fi
  targets=(hpctrain)
  [[ "$CPU_ONLY" != 1 ]] && targets+=(ht_gpu_tests)
  lim=$(limit_for "$BUILD_LIMIT")
  limited "$lim" cmake --build "$BUILD" -j "$CORES" --target "${targets[@]}" >>"$LOG" 2>&1
  rc=$?
  status build_rc $rc
  status build_done_at_s "$(elapsed)"
  if (( rc == 124 || rc == 137 )); then echo "device_check: build stopped by its $lim s limit"; tail -5 "$LOG"; fi
  if (( rc != 0 )); then grep -E "error|FAILED" "$LOG" | head -30; unverified build "$(why $rc) (limit $lim s)"; fi
else
  status build_rc "skipped (HT_DEVICE_SKIP_BUILD=1: reusing $BUILD)"
fi
write_json
[[ -x "$BUILD/hpctrain" ]] || { unverified hpctrain "no $BUILD/hpctrain: nothing below can run"; finish; }

# ---- 2b. the binary: unresolved libraries, and a 2-rank start through the relocated mpirun --------
ldd "$BUILD/hpctrain" >> "$LOG" 2>&1
missing=$(ldd "$BUILD/hpctrain" 2>&1 | awk '/not found/ {print $1}' | sort -u | tr '\n' ' ')
status missing_libraries "${missing:-none}"
[[ -n "$missing" ]] && unverified libraries "unresolved: $missing"
lim=$(limit_for $MPI_LIMIT)
limited "$lim" "$ROOT/usr/bin/mpirun.openmpi" --oversubscribe -np 2 "$BUILD/hpctrain" doctor --device cpu \
  > "$RES/mpi_np2_doctor.txt" 2>&1
rc=$?
status mpi_np2_rc $rc
(( rc != 0 )) && { tail -25 "$RES/mpi_np2_doctor.txt"; unverified mpi_np2 "mpirun -np 2 hpctrain doctor --device cpu: $(why $rc) (limit $lim s)"; }
write_json

# ---- 3. GPU tests ------------------------------------------------------------------------------
# One ctest call per test, each under its own time limit, so a hang costs one test (and says
# which) instead of the whole phase; timeout kills the test's process group. A test counts as
# passed only when its own ctest output says it ran and passed; skipped, failed, timed out, not
# run for lack of time, or expected but not registered: each is named as not verified.
# The unit tests run per area (tests/cmake/gpu.cmake), so one sticky CUDA error costs one area; the
# test gpu_test_areas keeps this list equal to ctest's gpu tests.
EXPECTED_GPU_TESTS=(gpu_ops_conv2d gpu_ops_linear gpu_ops_batchnorm gpu_ops_pool gpu_ops_elementwise gpu_ops_sgd
                    gpu_ops_softmax_xent gpu_ops_allocator gpu_lowp_conv2d gpu_lowp_linear gpu_lowp_batchnorm
                    gpu_lowp_pool gpu_lowp_elementwise gpu_lowp_convert gpu_lowp_nccl gpu_nccl gpu_nccl_timeout
                    gpu_train_cpu_vs_gpu gpu_train_bf16 gpu_train_fp16 gpu_train_evaluation gpu_train_accumulation
                    gpu_train_tf32 gpu_train_deterministic gpu_train_exact_resume gpu_train_shared_gpu
                    gpu_train_fp16_overflow gpu_train_evaluation_bf16)
if [[ "$CPU_ONLY" == 1 ]]; then
  status ctest_gpu_summary "not run (HT_DEVICE_CPU_ONLY=1)"
elif [[ ! -x "$BUILD/tests/ht_gpu_tests" ]]; then
  status ctest_gpu_summary "not run: no $BUILD/tests/ht_gpu_tests"
  unverified gpu_tests "ht_gpu_tests was not built"
else
  t_phase=$(date +%s)
  mapfile -t LISTED < <(cd "$BUILD" && ctest -L gpu -N 2>/dev/null | sed -n 's/^ *Test *#[0-9]*: *//p')
  declare -A IS_LISTED=()
  for t in "${LISTED[@]}"; do IS_LISTED[$t]=1; done
  GTESTS=("${EXPECTED_GPU_TESTS[@]}")  # the expected ones first, in this order, then any others
  for t in "${LISTED[@]}"; do [[ " ${EXPECTED_GPU_TESTS[*]} " == *" $t "* ]] || GTESTS+=("$t"); done
  : > "$RES/ctest_gpu.log"
  passed=0; bad=0; results=""
  for t in "${GTESTS[@]}"; do
    if [[ -z "${IS_LISTED[$t]:-}" ]]; then
      verdict=not_registered
    else
      left=$(( CTEST_BUDGET - ($(date +%s) - t_phase) ))
      lim=$(( left < CTEST_PER_TEST ? left : CTEST_PER_TEST ))
      lim=$(limit_for "$lim")
      if (( lim < 15 )); then
        verdict=not_run_no_time
      else
        t1=$(date +%s)
        out="$RES/.ctest_$t.log"
        (cd "$BUILD" && timeout -k "$KILL_AFTER" "$lim" ctest -R "^${t}\$" --output-on-failure) > "$out" 2>&1
        rc=$?
        cat "$out" >> "$RES/ctest_gpu.log"
        if (( rc == 124 || rc == 137 )); then verdict="timeout_${lim}s"
        elif grep -q "Skipped\|Not Run\|No tests were found" "$out"; then verdict=skipped
        elif (( rc == 0 )) && grep -q "100% tests passed, 0 tests failed out of 1$" "$out"; then verdict=passed
        else verdict="failed_rc$rc"; fi
        rm -f "$out"
        echo "device_check: ctest $t: $verdict in $(( $(date +%s) - t1 )) s (limit $lim s)" | tee -a "$LOG"
      fi
    fi
    # Once one GPU test has passed the GPU is known to work: the training tests skip their own
    # one-step probe (tests/gpu/gpu_train.py), which would cost each of them a process start.
    [[ $verdict == passed ]] && export HT_GPU_VERIFIED=1
    results+="$t=$verdict "
    if [[ $verdict == passed ]]; then passed=$((passed + 1)); else bad=$((bad + 1)); unverified "gpu test $t" "$verdict"; fi
    status ctest_gpu_tests "${results% }"
    write_json
  done
  status ctest_gpu_summary "${#GTESTS[@]} gpu tests: $passed passed, $bad not verified in $(( $(date +%s) - t_phase )) s"
  (( bad > 0 )) && tail -60 "$RES/ctest_gpu.log"
fi
write_json

# ---- 4. doctor ---------------------------------------------------------------------------------
# A GPU run's checks (default --device cuda); in CPU-only mode those of a CPU run.
doctor_args=(); [[ "$CPU_ONLY" == 1 ]] && doctor_args=(--device cpu)
lim=$(limit_for $DOCTOR_LIMIT)
limited "$lim" "$BUILD/hpctrain" doctor "${doctor_args[@]}" > "$RES/doctor.txt" 2>&1
rc=$?
status doctor_rc $rc
grep -E "^(rank|[0-9]+ )|CUDA driver|cuDNN|NCCL" "$RES/doctor.txt" | head -8
sed -n '/^Problems/,$p' "$RES/doctor.txt" | head -12
(( rc != 0 )) && unverified doctor "hpctrain doctor ${doctor_args[*]}: $(why $rc) (exit 1: problems found, see doctor.txt; limit $lim s)"
write_json

# ---- 5. training: ResNet-18 (CIFAR variant) on synthetic data, 1 GPU, and its losses -------------
# The loss bound comes from a CPU run of the same command (--train.device cpu, same config, seed 42,
# same max_steps, so the same initial weights, batches and schedule), on the 2-core dev VM at 10 s
# a step: its first 10 losses are below. The GPU run must give (a) step 1 within 1e-3 relative of
# the CPU's (same weights, same batch: only fp32 summation order differs), (b) steps 1-10 within 2e-2
# relative (cuDNN's algorithms round differently; the trajectories drift apart slowly), (c) $STEPS
# step records, every loss finite, and (d) a mean over the last 20 steps below 2.6, the CPU's worst
# early loss (2.53) plus a margin: training did not diverge. The CPU reference for steps 11-300 was
# not run (50 minutes there); with it, (d) can become "within X of the CPU's last-20 mean".
CPU_REF_LOSSES="2.4179373903784875 2.387383996751385 2.3193111566779954 2.35956379640482 2.327320872994629 2.467078812404762 2.5265511745898332 2.337205956284467 2.2893858344081157 2.468210700194823"
LAST20_MAX=2.6
if [[ "$CPU_ONLY" == 1 ]]; then
  status train_rc "not run (HT_DEVICE_CPU_ONLY=1)"
else
  RUN=$(mktemp -d /tmp/ht-device-run.XXXXXX)
  lim=$(limit_for $TRAIN_LIMIT)
  if (( lim < 20 )); then
    unverified training "not run: $lim s left before the $TOTAL_LIMIT s deadline"
  else
    timeout -k "$KILL_AFTER" "$lim" "$BUILD/hpctrain" train --config configs/resnet18_cifar10.ini --data.synthetic true \
      --train.device cuda --train.max_steps "$STEPS" --train.eval false --run.dir "$RUN" > "$RES/train.log" 2>&1
    rc=$?
    status train_rc $rc
    tail -15 "$RES/train.log"
    (( rc != 0 )) && unverified training "$(why $rc) (limit $lim s; see train.log)"
    if [[ -f "$RUN/metrics.jsonl" ]]; then
      cp "$RUN/metrics.jsonl" "$RES/train_metrics.jsonl"
      python3 - "$RUN/metrics.jsonl" "$STEPS" "$CPU_REF_LOSSES" "$LAST20_MAX" > "$RES/train_summary.txt" <<'PYEOF'
import json, math, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"step"' in l]
steps = [s for s in steps if s.get("event") == "step"]
want, ref, last_max = int(sys.argv[2]), [float(x) for x in sys.argv[3].split()], float(sys.argv[4])
bad = []
if not steps:
    print("steps=0 loss_check=FAIL(no step records)"); sys.exit()
loss = [s.get("loss") for s in steps]
if len(steps) != want or steps[-1].get("step") != want:
    bad.append(f"{len(steps)} step records ending at step {steps[-1].get('step')}, expected {want}")
nonfinite = [s.get("step") for s in steps if not isinstance(s.get("loss"), (int, float)) or not math.isfinite(s["loss"])]
if nonfinite:
    bad.append(f"non-finite loss at steps {nonfinite[:5]}")
if loss and isinstance(loss[0], float) and abs(loss[0] - ref[0]) > 1e-3 * ref[0]:
    bad.append(f"step 1 loss {loss[0]} vs CPU {ref[0]} (bound 1e-3 relative)")
for i, (g, c) in enumerate(zip(loss[:len(ref)], ref)):
    if not isinstance(g, float) or abs(g - c) > 2e-2 * c:
        bad.append(f"step {i + 1} loss {g} vs CPU {c} (bound 2e-2 relative)"); break
tail = [x for x in loss[-20:] if isinstance(x, float) and math.isfinite(x)]
mean20 = sum(tail) / len(tail) if tail else float("nan")
if not (mean20 < last_max):
    bad.append(f"mean loss of the last 20 steps {mean20:.4f}, bound {last_max}")
tl = steps[len(steps)//2:] or steps
ips = sorted(s.get("images_per_s", 0) for s in tl)
ms = sorted(s.get("step_ms", 0) for s in tl)
print(f"steps={steps[-1].get('step')} first_loss={loss[0]} last_loss={loss[-1]} last20_mean={mean20:.4f} "
      f"median_images_per_s={ips[len(ips)//2]:.1f} median_step_ms={ms[len(ms)//2]:.2f} "
      f"gpu_mem_bytes={steps[-1].get('gpu_memory_used_bytes', steps[-1].get('gpu_mem_used_bytes', 'n/a'))} "
      f"loss_check={'ok' if not bad else 'FAIL(' + '; '.join(bad) + ')'}")
PYEOF
      status train_summary "$(cat "$RES/train_summary.txt")"
      grep -q "loss_check=ok" "$RES/train_summary.txt" || unverified "training loss" "$(sed -n 's/.*loss_check=//p' "$RES/train_summary.txt")"
    else
      unverified "training loss" "no metrics.jsonl written"
    fi
  fi
fi
# ---- 6. throughput: ours at fp32/bf16/fp16 and PyTorch's modes, resnet18_cifar, batch 128 and 512 --
# One GPU, synthetic 32x32x3 data, 5 warm-up + 20 timed steps each, SGD momentum 0.9 (both sides).
# Ours first (each run its own process: cuDNN's algorithm search is part of its warm-up), then
# PyTorch's in one process (scripts/bench_torch_gpu.py). bench_train_gpu.json holds every record,
# bench_train_gpu.txt the table (also printed last). A failed or cut-off run is not verified.
BENCH_BATCHES=${HT_DEVICE_BENCH_BATCHES:-128 512}
if [[ "$CPU_ONLY" == 1 ]]; then
  status bench_summary "not run (HT_DEVICE_CPU_ONLY=1)"
else
  BDIR="$RES/bench"
  mkdir -p "$BDIR"
  t_bench=$(date +%s)
  ran=0; bad=0
  BENCH_PRECISIONS="fp32 bf16 fp16"
  if ! "$BUILD/hpctrain" --version 2>/dev/null | grep -q "CUDA backend: on"; then
    unverified "bench hpctrain" "not run: $BUILD/hpctrain was built without the CUDA backend"
    BENCH_PRECISIONS=""
  fi
  for prec in $BENCH_PRECISIONS; do
    for batch in $BENCH_BATCHES; do
      left=$(( BENCH_LIMIT - ($(date +%s) - t_bench) ))
      lim=$(limit_for $(( left < 20 ? left : 20 )))
      name="hpctrain_${prec}_b${batch}"
      if (( lim < 8 )); then
        uncompared "bench $name" "not run: no time left (phase limit $BENCH_LIMIT s, deadline $TOTAL_LIMIT s)"
        bad=$((bad + 1)); continue
      fi
      rm -rf "$BDIR/run_$name"
      timeout -k "$KILL_AFTER" "$lim" "$BUILD/hpctrain" bench train --warmup 5 --steps 20 --out "$BDIR/$name.json" --run.dir "$BDIR/run_$name" \
        --model.name resnet18_cifar --train.global_batch "$batch" --train.device cuda --train.precision "$prec" \
        --data.synthetic_channels 3 --data.synthetic_height 32 --data.synthetic_width 32 > "$BDIR/$name.log" 2>&1
      rc=$?
      echo "device_check: bench $name: rc $rc: $(tail -1 "$BDIR/$name.log")" | tee -a "$LOG"
      if (( rc == 124 || rc == 137 )); then uncompared "bench $name" "$(why $rc) (limit $lim s; see bench/$name.log)"; bad=$((bad + 1))
      elif (( rc != 0 )); then unverified "bench $name" "$(why $rc) (see bench/$name.log)"; bad=$((bad + 1))
      elif ! python3 -c 'import json, sys; sys.exit(0 if json.load(open(sys.argv[1])).get("losses_ok") else 1)' \
             "$BDIR/$name.json" 2>>"$LOG"; then
        # Fast and wrong: the losses are not finite or grew past the bound bench train states.
        unverified "bench $name" "losses fail their bound: $(python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); print("first", r.get("first_loss"), "last", r.get("last_loss"), "bound:", r.get("loss_bound"))' "$BDIR/$name.json" 2>&1)"
        bad=$((bad + 1))
      else ran=$((ran + 1)); fi
    done
  done
  lim=$(limit_for "$TORCH_LIMIT")
  if (( lim < 20 )); then
    uncompared "bench pytorch" "not run: $lim s left before the $TOTAL_LIMIT s deadline"
  else
    # The budget stops starting new modes 15 s before the limit (a mode then still has to finish).
    timeout -k "$KILL_AFTER" "$lim" python3 scripts/bench_torch_gpu.py --out "$BDIR/pytorch.json" --model resnet18_cifar \
      --batches "$(tr ' ' ',' <<<"$BENCH_BATCHES")" --warmup 5 --steps 20 --budget-s $(( lim > 30 ? lim - 15 : lim )) \
      > "$BDIR/pytorch.log" 2>&1
    rc=$?
    tail -12 "$BDIR/pytorch.log"
    (( rc != 0 )) && uncompared "bench pytorch" "$(why $rc) (limit $lim s; see bench/pytorch.log)"
  fi
  python3 - "$BDIR" "$RES/bench_train_gpu.json" > "$RES/bench_train_gpu.txt" <<'PYEOF'
import glob, json, os, sys
bdir, out = sys.argv[1], sys.argv[2]
rows, errors = [], []
for f in sorted(glob.glob(os.path.join(bdir, "hpctrain_*.json"))):
    try:
        r = json.load(open(f))
    except Exception as e:
        errors.append(f"{os.path.basename(f)}: {e}"); continue
    _, prec, b = os.path.basename(f)[:-5].split("_")
    # Peak device memory: the largest NVML reading of the run's step records (the whole device as
    # NVML sees it, the allocator's cached blocks included; PyTorch's figure is max_memory_allocated).
    mem = None
    try:
        steps = [json.loads(l) for l in open(os.path.join(bdir, f"run_{os.path.basename(f)[:-5]}", "metrics.jsonl"))]
        mem = max((s["gpu_memory_used_bytes"] for s in steps if s.get("event") == "step" and "gpu_memory_used_bytes" in s),
                  default=None)
    except Exception:
        pass
    rows.append({"framework": "hpctrain", "mode": prec, "batch": int(b[1:]), "images_per_s": r.get("images_per_s"),
                 "step_ms": r.get("step_ms"), "peak_memory_bytes": mem, "record": r})
try:
    pt = json.load(open(os.path.join(bdir, "pytorch.json")))
    for r in pt.get("results", []):
        rows.append({"framework": pt.get("framework", "pytorch"), "mode": r["mode"], "batch": r["batch"],
                     "images_per_s": r["images_per_s"], "step_ms": r["step_ms"],
                     "peak_memory_bytes": r.get("peak_memory_bytes"), "record": r})
    errors += pt.get("errors", [])
except Exception as e:
    errors.append(f"pytorch.json: {e}")
json.dump({"model": "resnet18_cifar", "input": [3, 32, 32], "warmup": 5, "timed_steps": 20, "rows": rows,
           "errors": errors}, open(out, "w"), indent=2)
print("throughput, resnet18_cifar, 1 GPU (images/s):")
for b in sorted({r["batch"] for r in rows}):
    best_pt = max((r["images_per_s"] for r in rows if r["batch"] == b and r["framework"] != "hpctrain"
                   and r["mode"] != "eager_fp32" and r["images_per_s"]), default=None)
    for r in (r for r in rows if r["batch"] == b):
        ratio = (f"  {r['images_per_s'] / best_pt:.2f}x best PyTorch low-precision"
                 if best_pt and r["framework"] == "hpctrain" and r["images_per_s"] else "")
        ips = f"{r['images_per_s']:.1f}" if r["images_per_s"] else "n/a"
        mem = f"{r['peak_memory_bytes'] / 2**30:6.2f} GiB" if r.get("peak_memory_bytes") else "     n/a"
        print(f"  batch {b:4d} {r['framework'][:16]:16s} {r['mode']:16s} {ips:>10s} {mem}{ratio}")
for e in errors:
    print("  error:", e)
PYEOF
  status bench_summary "$ran of 6 hpctrain runs measured in $(( $(date +%s) - t_bench )) s; table in bench_train_gpu.txt"
fi
write_json
finish
