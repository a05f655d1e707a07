#!/usr/bin/env bash
# Gathers, from Debian's packages, what the GPU verification machine lacks to BUILD and RUN hpctrain
# (it has nvcc, CMake, ninja, gcc and Python/PyTorch with cuDNN/NCCL/cuBLAS wheels, but no MPI,
# HDF5, Boost, oneDNN, Catch2 or nlohmann-json): `apt-get download` (nothing is installed here),
# `dpkg -x` into a staging tree, prune docs/man/static libraries/Fortran, and pack the tree as .device_deps/deps.tar.xz
# (git-ignored, travels with the working tree; must stay under 64 MiB). scripts/device_check.sh
# unpacks it on the device machine.
#
# Usage: scripts/pack_device_deps.sh [--unpack]   (--unpack also leaves the tree in .device_deps/root
#        for testing the device script's environment setup here)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=.device_deps
LIMIT_MIB=64
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/ht-device-deps.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# Build + runtime packages, with the runtime libraries they need beyond a base system (glibc,
# libstdc++, libgcc, zlib, libgomp). Libraries that the device already has are not used there:
# device_check.sh exposes only the sonames its ldconfig does not know.
PKGS=(
  # MPI (Open MPI 4.1): headers, wrappers, mpirun/orted, runtime and its libraries
  libopenmpi-dev libopenmpi3 openmpi-bin openmpi-common
  libpmix2 libmunge2 libhwloc15 libevent-core-2.1-7 libevent-pthreads-2.1-7 libnuma1 libltdl7 libudev1
  # HDF5 (serial, C, C++, high level) and its libraries
  libhdf5-dev libhdf5-103-1 libhdf5-cpp-103-1 libhdf5-hl-100 libhdf5-hl-cpp-100 libaec0 libsz2 libaec-dev
  libcurl4 libssl3 libnghttp2-14 libpsl5 libssh2-1 librtmp1 libidn2-0 libunistring2 libbrotli1 libzstd1
  libldap-2.5-0 libsasl2-2 libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libkeyutils1 libcom-err2
  libgnutls30 libhogweed6 libnettle8 libgmp10 libp11-kit0 libtasn1-6 libffi8
  # Boost.Program_options (with all Boost headers)
  libboost-program-options1.74-dev libboost-program-options1.74.0 libboost1.74-dev libboost-program-options-dev
  # oneDNN (its CMake config requires OpenCL headers and the ICD loader)
  libdnnl-dev libdnnl2 ocl-icd-opencl-dev ocl-icd-libopencl1 opencl-c-headers opencl-clhpp-headers
  # header-only and small
  catch2 nlohmann-json3-dev zlib1g-dev zlib1g
  # JPEG/PNG decoding (prepare --format imagefolder)
  libturbojpeg0-dev libturbojpeg0 libjpeg62-turbo-dev libjpeg62-turbo libpng-dev libpng16-16
)

echo "pack_device_deps: downloading ${#PKGS[@]} packages"
mkdir -p "$WORK/debs" "$WORK/root"
(cd "$WORK/debs" && apt-get download "${PKGS[@]}" >/dev/null)
for deb in "$WORK"/debs/*.deb; do dpkg -x "$deb" "$WORK/root"; done
ls "$WORK/debs" | sed 's/_amd64.deb$//; s/_all.deb$//' > "$WORK/root/PACKAGES.txt"

R="$WORK/root"
# Prune what neither the build nor the run needs.
rm -rf "$R"/usr/share/doc "$R"/usr/share/man "$R"/usr/share/info "$R"/usr/share/lintian "$R"/usr/share/locale \
       "$R"/usr/share/bug "$R"/usr/share/doc-base "$R"/lib/udev "$R"/usr/lib/udev "$R"/bin "$R"/sbin "$R"/usr/sbin
find "$R" -name '*.a' ! -name 'libCatch2*' -delete  # Catch2's CMake config names its .a files
find "$R" \( -name '*mpifh*' -o -name '*usempi*' -o -name '*.mod' -o -name '*fortran*' -o -name 'mpif*.h' \
         -o -name '*java*' -o -name '*.jar' \) -prune -exec rm -rf {} +
# Open MPI components that need libraries we do not ship (UCX, libfabric, verbs, PSM, CUDA): removed
# so MPI_Init does not warn about them; shared memory and TCP are enough for one node.
find "$R"/usr/lib/x86_64-linux-gnu/openmpi -name 'mca_*' \( -name '*ucx*' -o -name '*ofi*' -o -name '*openib*' \
     -o -name '*psm*' -o -name '*cuda*' -o -name '*verbs*' -o -name '*usnic*' -o -name '*uct*' -o -name '*portals*' \
     -o -name '*hcoll*' -o -name '*fca*' \) -delete 2>/dev/null || true
find "$R"/usr/lib/x86_64-linux-gnu/pmix* -name '*ucx*' -delete 2>/dev/null || true
# ... and what needs libnl (reachable_netlink: reachable_weighted remains) or only served the
# components above; each of these printed a load warning on every MPI_Init in a minimal system.
rm -f "$R"/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/mca_reachable_netlink.so \
      "$R"/usr/lib/x86_64-linux-gnu/libmca_common_{ucx,verbs,ofi}.so*

# Boost: all headers are kept (9 MiB packed). An include closure computed here once missed
# boost/config/helper_macros.hpp (g++ -MM leaves out some headers) and broke the build in a chroot
# without /usr/include/boost; conditional includes also differ between compiler versions.
echo "pack_device_deps: kept $(find "$R/usr/include/boost" -type f | wc -l) Boost headers"

# Absolute symlinks would point into the device's /usr: make them relative to the tree.
find "$R" -type l | while read -r l; do
  t=$(readlink "$l")
  if [[ "$t" == /* ]]; then
    ln -sfn "$(realpath -m --relative-to="$(dirname "$l")" "$R$t")" "$l"
  fi
done

rm -f "$OUT/deps.tar.xz"
tar -C "$R" -cf - . | xz -T2 -6 > "$OUT/deps.tar.xz"
cp "$R/PACKAGES.txt" "$OUT/PACKAGES.txt"
unpacked=$(du -sm "$R" | cut -f1)
packed=$(( $(stat -c %s "$OUT/deps.tar.xz") / 1048576 ))
echo "pack_device_deps: $OUT/deps.tar.xz is ${packed} MiB (unpacked ${unpacked} MiB, ${#PKGS[@]} packages)"
if (( packed >= LIMIT_MIB )); then
  echo "pack_device_deps: over the ${LIMIT_MIB} MiB limit" >&2
  exit 1
fi
if [[ "${1:-}" == "--unpack" ]]; then
  rm -rf "$OUT/root"
  mkdir -p "$OUT/root"
  tar -C "$OUT/root" -xJf "$OUT/deps.tar.xz"
  echo "pack_device_deps: unpacked into $OUT/root"
fi
