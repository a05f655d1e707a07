# Sourced by the container tests (and usable by hand): a CONTAINERS_CONF for rootful podman and
# buildah on machines like the test machines, without touching /etc/containers. Two settings are
# needed there, both measured: the OCI runtime is runc (crun cannot create containers under a hybrid
# cgroup hierarchy), and the default ulimits must not exceed this shell's hard limits (podman's
# default nofile=1048576 fails where the hard limit is lower). Leaves an existing CONTAINERS_CONF
# alone. Sets HT_PODMAN_CONF_DIR (removed by the caller when it likes).
ht_podman_env() {
  [[ -n ${CONTAINERS_CONF:-} ]] && return 0
  local nofile nproc
  nofile=$(ulimit -Hn); nproc=$(ulimit -Hu)
  [[ $nofile == unlimited ]] && nofile=1048576
  [[ $nproc == unlimited ]] && nproc=1048576
  HT_PODMAN_CONF_DIR=$(mktemp -d "${TMPDIR:-/tmp}/ht-podman.XXXXXX")
  cat >"$HT_PODMAN_CONF_DIR/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=${nofile}:${nofile}", "nproc=${nproc}:${nproc}"]
[engine]
runtime = "runc"
CONF
  export CONTAINERS_CONF=$HT_PODMAN_CONF_DIR/containers.conf
}
