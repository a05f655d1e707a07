#!/usr/bin/env bash
# Builds the CPU base image (Debian 12 "bookworm", minbase) from Debian's archive with mmdebstrap
# and imports it into podman as IMAGE (default localhost/hpctrain-base:bookworm), for machines that
# reach Debian's archive but no container registry (where docker.io/library/debian:12 can be pulled,
# use that instead). The root file system tarball is cached in HT_CONTAINER_CACHE (default
# /var/cache/hpctrain-containers) and reused while it is younger than HT_BASE_MAX_AGE_DAYS (7), so
# reruns skip mmdebstrap (about a minute) and the import (seconds) when the image already exists.
# Usage: containers/build_base.sh [IMAGE]
# Environment: HT_DEBIAN_MIRROR (http://deb.debian.org/debian), HT_DEBIAN_SECURITY_MIRROR
# (http://deb.debian.org/debian-security).
set -euo pipefail
image=${1:-localhost/hpctrain-base:bookworm}
cache=${HT_CONTAINER_CACHE:-/var/cache/hpctrain-containers}
mirror=${HT_DEBIAN_MIRROR:-http://deb.debian.org/debian}
tarball=$cache/debian-bookworm-minbase.tar
max_age=${HT_BASE_MAX_AGE_DAYS:-7}

if [[ -f $tarball && -z $(find "$tarball" -mtime +"$max_age" 2>/dev/null) ]] &&
   podman image exists "$image"; then
  exit 0
fi
mkdir -p "$cache"
if [[ ! -f $tarball || -n $(find "$tarball" -mtime +"$max_age" 2>/dev/null) ]]; then
  # mmdebstrap picks the output format from the name: it must end in .tar.
  tmp=$cache/partial-$$.tar
  rm -f "$cache"/partial-*.tar
  echo "build_base: mmdebstrap bookworm (minbase) from $mirror"
  # Security updates too, as on a maintained host; ca-certificates for https mirrors.
  mmdebstrap --variant=minbase --include=ca-certificates --quiet \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
    bookworm "$tmp" \
    "deb $mirror bookworm main" "deb $mirror bookworm-updates main" \
    "deb ${HT_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security} bookworm-security main"
  mv "$tmp" "$tarball"
fi
echo "build_base: podman import -> $image"
podman import --change 'CMD ["/bin/bash"]' --change 'ENV LANG=C.UTF-8' "$tarball" "$image" >/dev/null
