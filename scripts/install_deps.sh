#!/usr/bin/env bash
# Installs, with apt, exactly the Debian packages hpctrain needs (HT_DEPS=build: only those to build it). Idempotent, and quiet when all
# of them are already installed. The CUDA toolkit (nvcc, cuDNN, NCCL) is not a Debian package: the
# build uses /usr/local/cuda when it exists and builds CPU-only otherwise.
set -euo pipefail

# What building hpctrain needs (HT_DEPS=build installs only these: the container recipe's build stage).
BUILD_PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libopenmpi-dev                          # MPI ranks and the CPU allreduce
  libhdf5-dev                             # datasets and checkpoints (C and C++ API)
  libboost-program-options-dev            # config files and flags
  libdnnl-dev ocl-icd-opencl-dev          # oneDNN for the CPU ops (its CMake config needs OpenCL)
  zlib1g-dev                              # gzipped IDX files
  libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev  # JPEG/PNG decoding (prepare, the loader)
  nlohmann-json3-dev                      # metrics and benchmark JSON
)
PACKAGES=(
  "${BUILD_PACKAGES[@]}"
  openmpi-bin hdf5-tools                  # mpirun, h5dump
  catch2                                  # unit tests (Catch2 2.13)
  python3-h5py python3-numpy python3-matplotlib   # scripts: checks, plots
  python3-pil                             # tests: generated image folders and the PIL reference
  python3-torch python3-torchvision       # reference in cross-check tests and CPU baselines
  dataset-fashion-mnist                   # the quickstart's real data
)
if [[ ${HT_DEPS:-all} == build ]]; then
  PACKAGES=("${BUILD_PACKAGES[@]}")
  HT_WITH_SLURM=0
fi
# HT_DEPS_PACKAGES: exactly these instead (word-split), with the same check and install; the log
# lines say HT_DEPS_NAME (containers/install_tools.sh: the container tools).
if [[ -n ${HT_DEPS_PACKAGES:-} ]]; then
  read -r -a PACKAGES <<<"$HT_DEPS_PACKAGES"
  HT_WITH_SLURM=0
fi
name=${HT_DEPS_NAME:-install_deps}
if [[ "${HT_WITH_SLURM:-1}" == 1 ]]; then
  PACKAGES+=(slurmctld slurmd slurm-client munge)  # Slurm for the sbatch tests (one node, or several: tests/cluster)
  PACKAGES+=(iproute2)                             # ip: the simulated cluster's namespaces and links (tests/cluster)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "$name: installing ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "$name: done"
