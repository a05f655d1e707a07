#!/usr/bin/env bash
# The mutation run (docs/testing.md#the-mutation-run): builds the sanitizer build (ASan + UBSan, CPU)
# if needed, makes real shards and checkpoints, and runs seeded mutants of them through
# `hpctrain inspect` and a training start or resume, each with a hang limit. Exit 0 only with
# 0 crashes, 0 hangs and 0 mutants accepted with other content (the classes: tests/mutation/run_mutation.py).
# Usage: scripts/mutation_run.sh [--count N] [--seed S] [--jobs J] [--only I,J,...] [--keep]
#   --count N   mutants (default 320)        --seed S  generator seed (default 1)
#   --jobs J    trials at a time (default: twice the cores, at most 8; a trial mostly waits on start-up)
#   --only I,.. only these mutant indices of (seed, count): reproduces a failure
#   --keep      keep every trial's directory under BUILD_DIR/mutation
# Environment: BUILD_DIR (default build-sanitize), HT_JOBS (build jobs, default: cores).
# Writes BUILD_DIR/mutation_summary.json; failing trials are kept under BUILD_DIR/mutation/failures.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-sanitize}
JOBS=${HT_JOBS:-$(nproc)}
ARGS=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --count|--seed|--jobs|--only) ARGS+=("$1" "$2"); shift 2 ;;
    --keep) ARGS+=("$1"); shift ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "mutation_run.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
t0=$(date +%s)
if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]]; then
  cmake -S . -B "$BUILD_DIR" "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHT_ENABLE_CUDA=OFF \
    -DHT_SANITIZE=address,undefined
fi
if ! grep -q '^HT_SANITIZE:STRING=address,undefined$' "$BUILD_DIR/CMakeCache.txt"; then
  echo "mutation_run.sh: $BUILD_DIR is not a sanitizer build (HT_SANITIZE=address,undefined)" >&2
  exit 2
fi
cmake --build "$BUILD_DIR" -j "$JOBS" --target hpctrain
t1=$(date +%s)
echo "mutation_run.sh: sanitizer build ready in $((t1 - t0)) s"
/usr/bin/python3 tests/mutation/run_mutation.py --bin "$BUILD_DIR/hpctrain" --mpiexec "$(command -v mpirun)" \
  --work "$BUILD_DIR/mutation" --summary "$BUILD_DIR/mutation_summary.json" \
  --command "scripts/mutation_run.sh $*" "${ARGS[@]}"
# Mutated JPEG/PNG files through `prepare --format imagefolder` (docs/testing.md#the-mutation-run).
/usr/bin/python3 tests/mutation/run_image_mutation.py --bin "$BUILD_DIR/hpctrain" --work "$BUILD_DIR/image_mutation"
