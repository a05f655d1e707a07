#!/usr/bin/env bash
# The main job on a fresh machine: install dependencies, build, convert Debian's Fashion-MNIST to
# hpctrain's sharded HDF5 format, and train fmnist_cnn across 2 MPI ranks on the CPU, printing the
# test accuracy. Extra arguments go to 'hpctrain train' (e.g. --train.epochs 1).
# Environment: BUILD_DIR (build), DATA_DIR (data/fashion-mnist), RUN_DIR (runs/quickstart), NP (2).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
BUILD_DIR=${BUILD_DIR:-build}
DATA_DIR=${DATA_DIR:-data/fashion-mnist}
RUN_DIR=${RUN_DIR:-runs/quickstart}
NP=${NP:-2}
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
[[ -f "$BUILD_DIR/CMakeCache.txt" ]] || cmake -S . -B "$BUILD_DIR" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD_DIR" -j "$(nproc)" --target hpctrain
HT="$BUILD_DIR/hpctrain"

if [[ ! -f "$DATA_DIR/test-00000-of-00001.h5" ]]; then
  "$HT" prepare --format fashion-mnist --input /usr/share/datasets/fashion-mnist --output "$DATA_DIR" --shards 4
fi

MPIRUN=(mpirun -np "$NP" --bind-to none)
(( $(nproc) < NP )) && MPIRUN+=(--oversubscribe)
if [[ $(id -u) -eq 0 ]]; then MPIRUN+=(--allow-run-as-root); fi
# One compute thread per rank when ranks fill the cores.
"${MPIRUN[@]}" -x OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" "$HT" train --config configs/fmnist_cnn.ini \
  --data.dir "$DATA_DIR" --run.dir "$RUN_DIR" --run.fresh "$@"
