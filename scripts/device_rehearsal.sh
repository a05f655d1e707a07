#!/usr/bin/env bash
# Rehearses scripts/device_check.sh on this Debian machine (no GPU needed) in a chroot that looks
# like the GPU verification machine: a newer distribution (Debian trixie: gcc 14, glibc 2.41,
# Python 3.13) with only a compiler, CMake, ninja and Python (no MPI, HDF5, Boost, oneDNN, Catch2,
# json, zlib headers, ssh or git), /usr/local/cuda-13.0 as a hard-link copy of this machine's
# toolkit, and cuDNN/NCCL/cuBLAS laid out as PyTorch's pip wheels in /opt/torch/.venv (paths taken
# from the wheels' dist-info RECORD files under /usr/local/cuda/dist-info). Results and timings:
# results/h200/REHEARSAL.md. Root only; takes minutes (the chroot) plus one full build.
#
# usage: scripts/device_rehearsal.sh [VARIANT] [ENV=VALUE ...]
#   VARIANT A (default): toolkit without cuDNN/NCCL, both from the wheels
#           B: toolkit with cuDNN/NCCL (and the wheels)
#           C: toolkit without cuDNN/NCCL/cuBLAS: cuBLAS from the nvidia/cu13 wheel too
#   ENV=VALUE are passed to device_check.sh (e.g. HT_DEVICE_BUILD_TIMEOUT=1500 on 2 cores).
# Environment: HT_CHROOT (default /work/chroot-trixie; kept between runs), HT_SUITE (trixie).
# Prerequisite: scripts/pack_device_deps.sh (makes .device_deps/deps.tar.xz).
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$PWD
V=${1:-A}; shift || true
CH=${HT_CHROOT:-/work/chroot-trixie}
HOSTCUDA=$(realpath /usr/local/cuda)
[[ -f .device_deps/deps.tar.xz ]] || { echo "run scripts/pack_device_deps.sh first" >&2; exit 2; }

# 1. The chroot (once).
if [[ ! -x "$CH/usr/bin/cmake" ]]; then
  command -v mmdebstrap >/dev/null || apt-get install -y mmdebstrap
  mmdebstrap --variant=minbase \
    --include=build-essential,cmake,ninja-build,python3,python3-venv,python3-numpy,binutils,file,xz-utils,procps \
    "${HT_SUITE:-trixie}" "$CH" http://deb.debian.org/debian
fi

# 2. The toolkit (hard links: same file system, no space) and the wheels.
rm -rf "$CH/usr/local/cuda-13.0" "$CH/usr/local/cuda"
cp -al "$HOSTCUDA" "$CH/usr/local/cuda-13.0"
ln -s /usr/local/cuda-13.0 "$CH/usr/local/cuda"
T=$CH/usr/local/cuda-13.0
rm -rf "$T/dist-info"
if [[ $V == A || $V == C ]]; then rm -rf "$T"/include/cudnn* "$T"/include/nccl* "$T"/lib/libcudnn* "$T"/lib/libnccl*; fi
if [[ $V == C ]]; then rm -rf "$T"/include/cublas* "$T"/lib/libcublas* "$T"/lib/libnvblas*; fi
[[ -x "$CH/opt/torch/.venv/bin/python3" ]] || chroot "$CH" python3 -m venv --system-site-packages /opt/torch/.venv
SP=$(echo "$CH"/opt/torch/.venv/lib/python3.*/site-packages)
rm -rf "$SP"/nvidia "$SP"/nvidia_*.dist-info
for d in "$HOSTCUDA"/dist-info/nvidia_{cudnn_cu13,nccl_cu13,cublas,cuda_runtime,nvjitlink,cuda_nvrtc}-*.dist-info; do
  cp -a "$d" "$SP/"
  cut -d, -f1 "$d/RECORD" | grep '^nvidia/' | while read -r f; do
    src=$HOSTCUDA/${f#nvidia/*/}  # nvidia/cudnn/lib/libcudnn.so.9 -> lib/libcudnn.so.9
    mkdir -p "$SP/$(dirname "$f")"
    [[ -e "$src" ]] && { ln -f "$src" "$SP/$f" 2>/dev/null || cp -a "$src" "$SP/$f"; }
  done
done
echo "device_rehearsal: variant $V: $(find "$SP/nvidia" -type f | wc -l) wheel files"

# 3. A clean copy of the working tree (as the device gets it: no .git, no build folders).
for m in proc sys dev dev/pts; do mountpoint -q "$CH/$m" || mount --bind "/$m" "$CH/$m"; done
trap 'for m in dev/pts dev sys proc; do umount "$CH/$m" 2>/dev/null || true; done' EXIT
rm -rf "$CH/root/hpctrain" "$CH/root/out$V"
mkdir -p "$CH/root/hpctrain"
git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | tar -C "$CH/root/hpctrain" -xf -
mkdir -p "$CH/root/hpctrain/.device_deps" && cp .device_deps/deps.tar.xz "$CH/root/hpctrain/.device_deps/"

# 4. The check, as root, with the device's PATH (the venv's python3 first).
# Without a GPU the check exits 1 (its GPU items are not verified): that is the expected outcome here,
# and the library scan below must still run.
rc=0
/usr/bin/time -f "device_rehearsal: wall %e s" chroot "$CH" /usr/bin/env -i HOME=/root TERM=dumb \
  PATH=/opt/torch/.venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  OUT=/root/out$V "$@" bash /root/hpctrain/scripts/device_check.sh || rc=$?
echo "device_rehearsal: device_check.sh exited $rc (1 is expected without a GPU)"
python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$CH/root/out$V/device_check.json" \
  && echo "device_rehearsal: $CH/root/out$V/device_check.json is valid JSON"

# 5. Every packed ELF file resolves its libraries in the chroot through the script's shim (this is
#    how libmunge.so.2 and libnl-3.so.200 were found missing).
for m in proc dev; do mountpoint -q "$CH/$m" || mount --bind "/$m" "$CH/$m"; done
chroot "$CH" /usr/bin/env -i PATH=/usr/bin:/bin bash -c '
  D=/root/hpctrain/.device_deps; export LD_LIBRARY_PATH=$D/shim
  find $D/root -type f \( -name "*.so*" -o -path "*/usr/bin/*" \) | while read -r f; do
    ldd "$f" 2>/dev/null | awk -v f="$f" "/not found/ {print \"device_rehearsal: unresolved in \" f \": \" \$1}"
  done' | sort -u | head -40
echo "device_rehearsal: library scan of the packed tree done (no 'unresolved' lines above = clean)"
