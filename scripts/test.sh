#!/usr/bin/env bash
# Everything to pass the tests on a fresh machine: install what is missing, configure, build
# (the CUDA backend too whenever nvcc exists), run ctest. Usage: scripts/test.sh [ctest args...]
# Environment: BUILD_DIR (default build), HT_JOBS (default: number of cores).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${HT_JOBS:-$(nproc)}
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]]; then
  cmake -S . -B "$BUILD_DIR" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release
fi
cmake --build "$BUILD_DIR" -j "$JOBS"
cd "$BUILD_DIR"
ctest --output-on-failure -j "${HT_TEST_JOBS:-1}" -LE "container|multinode" "$@"
