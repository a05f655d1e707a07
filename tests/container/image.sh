# shellcheck shell=bash
# Sourced by the container tests (tests/container/test_container*.sh): can rootful podman run here,
# and the project's CPU image built from this checkout (or reused: podman's layer cache and the
# recipe's ccache mount make a build of unchanged sources take seconds).
ht_ctr_src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

# ht_ctr_ready: root, the tools (containers/install_tools.sh), user/mount/PID namespaces and a podman
# that works with the CONTAINERS_CONF of containers/podman_env.sh (exported; HT_PODMAN_CONF_DIR is
# the caller's to remove). Prints "SKIP: reason" and returns 77 when any of them is missing.
ht_ctr_ready() {
  [[ $(id -u) -eq 0 ]] || { echo "SKIP: needs root (rootful podman, Slurm daemons)"; return 77; }
  "$ht_ctr_src/containers/install_tools.sh" ||
    { echo "SKIP: containers/install_tools.sh failed (apt or Debian's archive unreachable?)"; return 77; }
  unshare --user --mount --pid --fork true 2>/dev/null ||
    { echo "SKIP: cannot create user, mount and PID namespaces here"; return 77; }
  # shellcheck source=../../containers/podman_env.sh
  source "$ht_ctr_src/containers/podman_env.sh"
  ht_podman_env
  podman info >/dev/null 2>&1 || { echo "SKIP: podman does not work here: $(podman info 2>&1 | tail -1)"; return 77; }
}

# ht_ctr_build IMAGE LOG: the Debian 12 base image (containers/build_base.sh: mmdebstrap, cached) and
# `podman build` of containers/Containerfile on it (CPU), tagged IMAGE, with this checkout's commit
# (and whether it is modified) for `hpctrain --version`; the build's output goes to LOG. Sets
# ht_ctr_commit, ht_ctr_size (bytes) and ht_ctr_id (the image id: run the image by it, since another
# build may move the tag meanwhile). Returns 77 ("SKIP: ...") when the base cannot be built (no
# Debian archive), 1 ("FAIL: ...", the log's tail) when the recipe does not build.
ht_ctr_build() {
  local image=$1 log=$2 base=localhost/hpctrain-base:bookworm b0=$SECONDS dirty=0
  "$ht_ctr_src/containers/build_base.sh" "$base" ||
    { echo "SKIP: containers/build_base.sh failed (mmdebstrap needs Debian's archive)"; return 77; }
  echo "podman build (containers/Containerfile on $base)"
  ht_ctr_commit=$(git -C "$ht_ctr_src" rev-parse HEAD 2>/dev/null || echo unknown)
  [[ -n $(git -C "$ht_ctr_src" status --porcelain --untracked-files=no 2>/dev/null) ]] && dirty=1
  podman build --network=host -f "$ht_ctr_src/containers/Containerfile" --build-arg BASE_IMAGE="$base" \
    --build-arg HT_GIT_COMMIT="$ht_ctr_commit" --build-arg HT_GIT_DIRTY=$dirty --build-arg BUILD_JOBS="$(nproc)" \
    -t "$image" "$ht_ctr_src" >"$log" 2>&1 || { tail -n 60 "$log"; echo "FAIL: podman build" >&2; return 1; }
  grep -iE 'cache (hit|miss)|hits|misses' "$log" | head -4
  ht_ctr_size=$(podman image inspect --format '{{.Size}}' "$image")
  ht_ctr_id=$(podman image inspect --format '{{.Id}}' "$image")
  echo "image $image (${ht_ctr_id:0:12}): $(( ht_ctr_size / 1000000 )) MB (base" \
    "$(( $(podman image inspect --format '{{.Size}}' "$base") / 1000000 )) MB), built in $(( SECONDS - b0 )) s"
}
