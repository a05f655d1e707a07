#!/usr/bin/env bash
# Installs, with apt, the container tools the `container` tests use: podman and buildah (build and
# run the recipe), runc (rootful podman's runtime here: crun fails on hybrid cgroup hierarchies),
# mmdebstrap (the Debian 12 base image, built from Debian's archive since no registry is
# reachable), charliecloud and squashfs-tools (ch-run on a squashfs image). Idempotent and quiet
# when all are installed. Apptainer and enroot are not Debian packages: not installed, not tested.
set -euo pipefail

PACKAGES=(podman buildah runc mmdebstrap charliecloud squashfs-tools squashfuse fuse-overlayfs uidmap)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "install_tools: installing ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install_tools: done"
