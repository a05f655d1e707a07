#!/usr/bin/env bash
# Installs, with apt, the container tools the `container` tests use: podman and buildah (build and
# run the recipe), runc (rootful podman's runtime here: crun fails on hybrid cgroup hierarchies),
# mmdebstrap (the Debian 12 base image, built from Debian's archive since no registry is
# reachable), charliecloud and squashfs-tools (ch-run on a squashfs image). Idempotent and quiet
# when all are installed. Apptainer and enroot are not Debian packages: not installed, not tested.
set -euo pipefail

PACKAGES=(podman buildah runc mmdebstrap charliecloud squashfs-tools squashfuse fuse-overlayfs uidmap)

# The check and the apt install are install_deps.sh's, on this list.
HT_DEPS_NAME=install_tools HT_DEPS_PACKAGES="${PACKAGES[*]}" exec bash "$(dirname "$0")/../scripts/install_deps.sh"
