#!/usr/bin/env bash
# The container recipe's oneDNN (build stage, before scripts/install_deps.sh): hpctrain needs oneDNN
# 2.x (src/ops uses its v2 API; cmake/check_onednn.cmake stops the configure otherwise), which not
# every apt-based distribution ships: Debian 12 has libdnnl-dev 2.6.3, Ubuntu 24.04 3.1.1, Debian 13
# 3.x. MODE (the recipe's ONEDNN build argument):
#   auto      the distribution's libdnnl-dev when its candidate version is 2.x, else debian12
#   distro    the distribution's libdnnl-dev, whatever its version (install_deps.sh installs it)
#   debian12  Debian 12's libdnnl2 and libdnnl-dev 2.6.3-1 (amd64) from Debian's archive, checked
#             against the SHA256 sums below and installed with apt (which resolves their dependencies:
#             glibc, libstdc++, libgomp, OpenCL's ICD loader, all older than a newer distribution's);
#             install_deps.sh then finds libdnnl-dev installed and leaves it.
# The .debs are kept in OUT (default /opt/hpctrain/onednn) for the runtime stage, which installs the
# same libdnnl2 (the distribution's archive has no such package); OUT/source.txt says which was used.
# Environment: HT_DEBIAN_MIRROR (http://deb.debian.org/debian).
# Downloads with apt's own helper (apt-helper download-file checks the hash): minbase images have no
# curl or wget.
set -euo pipefail
mode=${1:-auto}
out=${2:-/opt/hpctrain/onednn}
mirror=${HT_DEBIAN_MIRROR:-http://deb.debian.org/debian}
version=2.6.3-1
declare -A sha256=(
  [libdnnl2]=9a8c4d2a880ac44175e531f55b9618b6539584c9fc5fd9eaf2070b6099a819bd
  [libdnnl-dev]=1ac357ed0464a1c559dd66600ee3e713a2eb3531e743ccebb9f4e9193497bef3
)
export DEBIAN_FRONTEND=noninteractive
mkdir -p "$out"
apt-get update -qq
# The candidate without its epoch: "2.6.3-1", "3.1.1-1", or "(none)" where the archive has none.
candidate=$(apt-cache policy libdnnl-dev | awk '$1 == "Candidate:" {print $2}' | sed 's/^[0-9]*://')
case $mode in
  auto) if [[ $candidate == 2.* ]]; then mode=distro; else mode=debian12; fi ;;
  distro|debian12) ;;
  *) echo "onednn.sh: ONEDNN='$mode' is not one of auto, distro, debian12" >&2; exit 2 ;;
esac
if [[ $mode == distro ]]; then
  echo "distro libdnnl-dev ${candidate:-none}" | tee "$out/source.txt"
  exit 0
fi
arch=$(dpkg --print-architecture)
[[ $arch == amd64 ]] ||
  { echo "onednn.sh: Debian 12's oneDNN is pinned for amd64 only, this is $arch (use ONEDNN=distro)" >&2; exit 2; }
# apt downloads as its sandbox user _apt: into a directory that user may write.
dl=$(mktemp -d)
chown _apt "$dl" 2>/dev/null || true
debs=()
for pkg in libdnnl2 libdnnl-dev; do
  f=${pkg}_${version}_amd64.deb
  /usr/lib/apt/apt-helper download-file "$mirror/pool/main/o/onednn/$f" "$dl/$f" "SHA256:${sha256[$pkg]}" \
    >/dev/null || { echo "onednn.sh: $f: download or SHA256 check failed ($mirror)" >&2; exit 1; }
  mv "$dl/$f" "$out/$f"  # apt-helper has checked its SHA256
  debs+=("$out/$f")
done
rmdir "$dl"
# Not held (apt-mark hold): install_deps.sh takes only "install ok installed" for installed. Nothing
# upgrades it: the build stage installs named packages only, and none depends on libdnnl-dev.
apt-get install -y -qq --no-install-recommends "${debs[@]}" >/dev/null
echo "debian12 libdnnl-dev $version (distribution's candidate: ${candidate:-none})" | tee "$out/source.txt"
