# shellcheck shell=bash
# Sourced by the container tests (and usable by hand): a CONTAINERS_CONF for rootful podman and
# buildah on machines like the test machines, without touching /etc/containers. Two settings are
# needed there, both measured: the OCI runtime is runc (crun cannot create containers under a hybrid
# cgroup hierarchy), and the default ulimits must be ones runc may set: nofile at most this shell's
# hard limit (podman's default 1048576 fails where that is lower), nproc at most both the hard limit
# and kernel.pid_max (runc is refused a higher one, even below the hard limit). Leaves an existing CONTAINERS_CONF
# alone. Sets HT_PODMAN_CONF_DIR (removed by the caller when it likes).
ht_podman_env() {
  [[ -n ${CONTAINERS_CONF:-} ]] && return 0
  local nofile nproc
  nofile=$(ulimit -Hn); nproc=$(ulimit -Hu)
  [[ $nofile == unlimited ]] && nofile=1048576
  [[ $nproc == unlimited ]] && nproc=1048576
  local pid_max
  pid_max=$(cat /proc/sys/kernel/pid_max 2>/dev/null || echo 32768)
  (( nproc > pid_max )) && nproc=$pid_max
  HT_PODMAN_CONF_DIR=$(mktemp -d "${TMPDIR:-/tmp}/ht-podman.XXXXXX")
  cat >"$HT_PODMAN_CONF_DIR/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=${nofile}:${nofile}", "nproc=${nproc}:${nproc}"]
[engine]
runtime = "runc"
CONF
  export CONTAINERS_CONF=$HT_PODMAN_CONF_DIR/containers.conf
}
