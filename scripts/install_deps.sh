#!/usr/bin/env bash
# Installs, with apt, exactly the Debian packages hpctrain needs. Idempotent, and quiet when all
# of them are already installed. The CUDA toolkit (nvcc, cuDNN, NCCL) is not a Debian package: the
# build uses /usr/local/cuda when it exists and builds CPU-only otherwise.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config
  openmpi-bin libopenmpi-dev              # MPI ranks and the CPU allreduce
  libhdf5-dev hdf5-tools                  # datasets and checkpoints (C and C++ API, h5dump)
  libboost-program-options-dev            # config files and flags
  catch2                                  # unit tests (Catch2 2.13)
  libdnnl-dev ocl-icd-opencl-dev          # oneDNN for the CPU ops (its CMake config needs OpenCL)
  zlib1g-dev                              # gzipped IDX files
  nlohmann-json3-dev                      # metrics and benchmark JSON
  python3-h5py python3-numpy python3-matplotlib   # scripts: checks, plots
  python3-torch python3-torchvision       # reference in cross-check tests and CPU baselines
  dataset-fashion-mnist                   # the quickstart's real data
)
if [[ "${HT_WITH_SLURM:-1}" == 1 ]]; then
  PACKAGES+=(slurmctld slurmd slurm-client munge)  # single-node Slurm for the sbatch tests
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "install_deps: installing ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install_deps: done"
