#!/usr/bin/env bash
# Builds a base image (Debian SUITE, default 12 "bookworm", minbase) from Debian's archive with
# mmdebstrap and imports it into podman as IMAGE (default localhost/hpctrain-base:SUITE), for machines that
# reach Debian's archive but no container registry (where docker.io/library/debian:12 can be pulled,
# use that instead). The root file system tarball is cached in HT_CONTAINER_CACHE (default
# /var/cache/hpctrain-containers) and reused while it is younger than HT_BASE_MAX_AGE_DAYS (7), so
# reruns skip mmdebstrap (about a minute) and the import (seconds) when the image already exists.
# Usage: containers/build_base.sh [IMAGE] [SUITE]   (SUITE: bookworm, the CPU image's base; trixie,
# Debian 13, whose oneDNN is 3.x: the recipe's ONEDNN=auto path for such distributions, docs/containers.md)
# Environment: HT_DEBIAN_MIRROR (http://deb.debian.org/debian), HT_DEBIAN_SECURITY_MIRROR
# (http://deb.debian.org/debian-security).
set -euo pipefail
suite=${2:-bookworm}
[[ $suite =~ ^[a-z]+$ ]] || { echo "build_base: bad SUITE '$suite' (a Debian code name: bookworm, trixie)" >&2; exit 2; }
image=${1:-localhost/hpctrain-base:$suite}
cache=${HT_CONTAINER_CACHE:-/var/cache/hpctrain-containers}
mirror=${HT_DEBIAN_MIRROR:-http://deb.debian.org/debian}
tarball=$cache/debian-$suite-minbase.tar
max_age=${HT_BASE_MAX_AGE_DAYS:-7}

if [[ -f $tarball && -z $(find "$tarball" -mtime +"$max_age" 2>/dev/null) ]] &&
   podman image exists "$image"; then
  exit 0
fi
mkdir -p "$cache"
if [[ ! -f $tarball || -n $(find "$tarball" -mtime +"$max_age" 2>/dev/null) ]]; then
  # mmdebstrap picks the output format from the name: it must end in .tar.
  tmp=$cache/partial-$suite-$$.tar
  rm -f "$cache"/partial-"$suite"-*.tar
  echo "build_base: mmdebstrap $suite (minbase) from $mirror"
  # Security updates too, as on a maintained host; ca-certificates for https mirrors.
  mmdebstrap --variant=minbase --include=ca-certificates --quiet \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
    "$suite" "$tmp" \
    "deb $mirror $suite main" "deb $mirror $suite-updates main" \
    "deb ${HT_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security} $suite-security main"
  mv "$tmp" "$tarball"
fi
echo "build_base: podman import -> $image"
podman import --change 'CMD ["/bin/bash"]' --change 'ENV LANG=C.UTF-8' "$tarball" "$image" >/dev/null
