#!/usr/bin/env bash
# A small simulated cluster on one machine, for the multi-node tests and by hand (docs/testing.md#multi-node).
# Each node is a set of Linux namespaces held open by one "holder" process:
#   - network: its own interface eth0 (10.213.0.K/24) on a private bridge, plus lo; the bridge lives in a
#     switch namespace of its own, so no address, route or link of the cluster exists outside it;
#   - UTS: its own hostname nodeK;
#   - mount: its own /dev/shm (tmpfs), its own /tmp (DIR/nodes/nodeK/tmp, with the cluster directory DIR
#     bound back in at its own path: DIR is the "shared file system"; so are the source tree and
#     HT_BIN's directory when they lie under /tmp), /etc/hosts naming every node.
# MPI crosses nodes without ssh: Open MPI's plm_rsh_agent is tests/cluster/node_rsh.sh, which enters the
# node's namespaces (nsenter); TCP only over eth0 (OMPI_MCA_btl=vader,tcp,self, btl/oob_tcp_if_include).
# With --slurm, munged, slurmctld (on node1) and one slurmd per node, through tests/slurm/cluster.sh.
#
# Usage (as root):
#   tests/cluster/cluster.sh run [--nodes N] [--slurm] [--timeout S] CMD [ARGS...]
#       builds the cluster, runs CMD on node1 (the head: mpirun, sbatch, ... run there) with the
#       cluster's environment, tears everything down (also on failure or a signal), exits with CMD's
#       status, 77 when the cluster cannot be built (the reason on stderr), 124 when CMD ran past S.
#   tests/cluster/cluster.sh shell [--nodes N] [--slurm]     leaves a cluster running; prints how to enter
#   tests/cluster/cluster.sh enter [nodeK]                   an interactive shell on nodeK (HT_CLUSTER_DIR set)
#   tests/cluster/cluster.sh exec nodeK CMD [ARGS...]        run CMD on nodeK (from anywhere, as root)
#   tests/cluster/cluster.sh link nodeK down|up              pull / plug node K's cable (switch side)
#   tests/cluster/cluster.sh pids nodeK                      process ids living on node K
# The last four find the cluster through HT_CLUSTER_DIR (set on every node; printed by `shell`).
# Sourced, the same as functions: ht_cluster_exec, ht_cluster_link, ht_cluster_pids, ht_cluster_kill_node.
#
# Environment: HT_CLUSTER_NODES (2; 1..4), HT_CLUSTER_NETS (1; 2 gives each node a second interface
# eth1, 10.213.1.K/24, on a second bridge), HT_CLUSTER_TMP (parent of the cluster directory, default
# $TMPDIR or /tmp), HT_CLUSTER_KEEP=1 keeps the directory. HT_SLURM_CPUS: CPUs each slurmd claims (2).
# HT_CLUSTER_SHARE=shm,tmp (either or both) lets the nodes share the host's /dev/shm or /tmp instead:
# only to reproduce what breaks when nodes on one machine are not separated (docs/testing.md).
#
# On every node CMD sees: HT_CLUSTER_DIR, HT_CLUSTER_HOSTS ("node1 node2"), HT_CLUSTER_IFACE (eth0),
# OMPI_MCA_plm_rsh_agent, OMPI_MCA_btl, OMPI_MCA_btl_tcp_if_include, OMPI_MCA_oob_tcp_if_include,
# OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM), and with --slurm SLURM_CONF. Put shared files under
# $HT_CLUSTER_DIR/work (every node sees it at the same path); /tmp and /dev/shm are per node.

HT_CLUSTER_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HT_CLUSTER_SUBNET=10.213
HT_CLUSTER_HOLDERS=()
ht_cluster_guard=()

ht_cluster_log() { echo "[cluster] $*" >&2; }

# ht_cluster_skip REASON: say why and return 77 (ctest's skip code).
ht_cluster_skip() { ht_cluster_log "SKIP: $*"; return 77; }

# ht_cluster_pid NODE: the holder pid of node NODE (nodeK or K) in the cluster at $HT_CLUSTER_DIR.
ht_cluster_pid() {
  local n=${1#node}
  [[ -n ${HT_CLUSTER_DIR:-} && -f $HT_CLUSTER_DIR/nodes/node$n/pid ]] || {
    ht_cluster_log "no node 'node$n' (HT_CLUSTER_DIR='${HT_CLUSTER_DIR:-}')"; return 1; }
  cat "$HT_CLUSTER_DIR/nodes/node$n/pid"
}

# ht_cluster_exec NODE CMD [ARGS...]: run CMD in node NODE's namespaces (same working directory when
# it exists there, else /). With ht_cluster_guard=(setpriv --pdeathsig KILL) CMD dies with the caller.
ht_cluster_exec() {
  local pid
  pid=$(ht_cluster_pid "$1") || return 1
  shift
  local wd=$PWD
  [[ -d $wd ]] || wd=/
  "${ht_cluster_guard[@]}" nsenter -t "$pid" --net --uts --mount --wd="$wd" -- "$@"
}

# ht_cluster_link NODE down|up: take node NODE's cable out / put it back (its switch-side veth end:
# the node's eth0 keeps its address and sees NO-CARRIER, as with a pulled cable or a dead switch port).
ht_cluster_link() {
  local n=${1#node} state=$2 sw
  [[ $state == up || $state == down ]] || { ht_cluster_log "link: up or down, not '$state'"; return 2; }
  sw=$(cat "$HT_CLUSTER_DIR/switch.pid") || return 1
  local i
  for (( i=0; i<${HT_CLUSTER_NETS_N:-$(cat "$HT_CLUSTER_DIR/nets")}; i++ )); do
    nsenter -t "$sw" --net -- ip link set "n${n}e$i" "$state" || return 1
  done
}

# ht_cluster_pids NODE: the pids of every process living in node NODE's network namespace (the
# holder included), one per line.
ht_cluster_pids() {
  local pid ns p
  pid=$(ht_cluster_pid "$1") || return 1
  ns=$(readlink "/proc/$pid/ns/net") || return 1
  for p in /proc/[0-9]*; do
    [[ $(readlink "$p/ns/net" 2>/dev/null) == "$ns" ]] && echo "${p#/proc/}"
  done
}

# ht_cluster_kill_node NODE [SIGNAL]: signal (default KILL) every process on node NODE but its holder
# (a node "dies"; its namespaces, address and link stay). Do not kill node1: the caller runs there.
ht_cluster_kill_node() {
  local holder p sig=${2:-KILL}
  holder=$(ht_cluster_pid "$1") || return 1
  for p in $(ht_cluster_pids "$1"); do
    [[ $p == "$holder" || $p == "$$" || $p == "$BASHPID" ]] || kill -"$sig" "$p" 2>/dev/null
  done
  return 0
}

# ht_cluster_start [N]: build N nodes (default HT_CLUSTER_NODES or 2). Sets and exports HT_CLUSTER_DIR;
# installs an EXIT trap that tears the cluster down. Returns 77 (with the reason) when it cannot.
ht_cluster_start() {
  local nodes=${1:-${HT_CLUSTER_NODES:-2}} nets=${HT_CLUSTER_NETS:-1}
  [[ $nodes =~ ^[1-4]$ ]] || { ht_cluster_log "nodes must be 1..4, not '$nodes'"; return 2; }
  [[ $nets =~ ^[12]$ ]] || { ht_cluster_log "HT_CLUSTER_NETS must be 1 or 2, not '$nets'"; return 2; }
  [[ $(id -u) -eq 0 ]] || { ht_cluster_skip "needs root (network, UTS and mount namespaces, veth links)"; return 77; }
  local b
  PATH=$PATH:/usr/sbin:/sbin
  for b in ip nsenter unshare setpriv mount; do
    command -v "$b" >/dev/null 2>&1 || { ht_cluster_skip "'$b' not found (iproute2, util-linux)"; return 77; }
  done
  if ! unshare --net --uts --mount true 2>/dev/null; then
    ht_cluster_skip "cannot create network/UTS/mount namespaces here (unshare --net --uts --mount failed)"
    return 77
  fi
  HT_CLUSTER_DIR=$(mktemp -d "${HT_CLUSTER_TMP:-${TMPDIR:-/tmp}}/ht-cluster.XXXXXX") || {
    ht_cluster_skip "cannot create a temporary directory"; return 77; }
  chmod 755 "$HT_CLUSTER_DIR"
  export HT_CLUSTER_DIR
  trap ht_cluster_stop EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  local d=$HT_CLUSTER_DIR k i
  mkdir -p "$d"/{nodes,work,log}
  echo "$nets" >"$d/nets"
  HT_CLUSTER_NETS_N=$nets
  # /etc/hosts of every node: the nodes by name, nothing else.
  {
    echo "127.0.0.1 localhost"
    for (( k=1; k<=nodes; k++ )); do echo "$HT_CLUSTER_SUBNET.0.$k node$k"; done
  } >"$d/hosts"
  local guard=(setpriv --pdeathsig KILL)
  # The switch: a network namespace holding the bridge(s).
  "${guard[@]}" unshare --net -- sleep infinity &
  HT_CLUSTER_HOLDERS+=($!)
  echo $! >"$d/switch.pid"
  local sw=$!
  # Host paths under /tmp that every node must see at the same path, bound back in over a node's own
  # /tmp: the cluster directory, the source tree (with the build folder in it: a clean clone of CI may
  # live under /tmp), the directory of HT_BIN, and HT_CLUSTER_BIND (colon-separated). A path inside
  # another listed one is left out (the outer bind carries it).
  local rel="" p q inside
  local cand=("$d" "$HT_CLUSTER_SRC")
  [[ -n ${HT_BIN:-} ]] && cand+=("$(cd "$(dirname "$HT_BIN")" 2>/dev/null && pwd)")
  IFS=: read -r -a extra_bind <<<"${HT_CLUSTER_BIND:-}"
  cand+=("${extra_bind[@]}")
  for p in "${cand[@]}"; do
    [[ $p == /tmp/* && -d $p ]] || continue
    inside=0
    for q in "${cand[@]}"; do [[ $q != "$p" && $q == /tmp/* && -d $q && $p == "$q"/* ]] && inside=1; done
    (( inside )) || rel+="${rel:+:}${p#/tmp/}"
  done
  for (( k=1; k<=nodes; k++ )); do
    local nd=$d/nodes/node$k
    mkdir -p "$nd/tmp"
    chmod 1777 "$nd/tmp"
    IFS=: read -r -a rels <<<"$rel"
    for p in "${rels[@]}"; do mkdir -p "$nd/tmp/$p"; done
    # The holder sets the node up from inside, then sleeps; the namespaces live as long as it does.
    # Mounts: DIR bound at its own path inside the node's tmp (before that tmp covers /tmp), the
    # node's tmp over /tmp (recursively, carrying DIR along), a fresh /dev/shm, the cluster's hosts.
    "${guard[@]}" unshare --net --uts --mount --propagation private -- bash -c '
      set -e
      d=$1; k=$2; rel=$3; nd=$d/nodes/node$k
      hostname "node$k"
      if [[ ,$4, != *,tmp,* ]]; then
        IFS=: read -r -a rels <<<"$rel"
        for r in "${rels[@]}"; do mount --bind "/tmp/$r" "$nd/tmp/$r"; done
        mount --rbind "$nd/tmp" /tmp
      fi
      [[ ,$4, == *,shm,* ]] || mount -t tmpfs -o mode=1777,size=1g tmpfs /dev/shm
      mount --bind "$d/hosts" /etc/hosts
      ip link set lo up
      touch "$nd/ready"
      exec sleep infinity' holder "$d" "$k" "$rel" "${HT_CLUSTER_SHARE:-}" >"$d/log/holder$k.log" 2>&1 &
    HT_CLUSTER_HOLDERS+=($!)
    echo $! >"$nd/pid"
  done
  # Wait for the holders to finish their setup.
  for (( k=1; k<=nodes; k++ )); do
    for _ in $(seq 1 100); do
      [[ -f $d/nodes/node$k/ready ]] && break
      kill -0 "$(cat "$d/nodes/node$k/pid")" 2>/dev/null || break
      sleep 0.05
    done
    if [[ ! -f $d/nodes/node$k/ready ]]; then
      cat "$d/log/holder$k.log" >&2
      ht_cluster_skip "node$k: namespace setup failed (mounts or hostname)"
      return 77
    fi
  done
  # Links: one bridge per network in the switch; node K's eth<i> paired with n<K>e<i> on the switch.
  for (( i=0; i<nets; i++ )); do
    if ! nsenter -t "$sw" --net -- ip link add "br$i" type bridge 2>"$d/log/ip.log" ||
       ! nsenter -t "$sw" --net -- ip link set "br$i" up 2>>"$d/log/ip.log"; then
      cat "$d/log/ip.log" >&2
      ht_cluster_skip "cannot create a bridge (no bridge support in this kernel?)"
      return 77
    fi
    for (( k=1; k<=nodes; k++ )); do
      local np
      np=$(cat "$d/nodes/node$k/pid")
      if ! ip link add "n${k}e$i" netns "$sw" type veth peer name "eth$i" netns "$np" 2>>"$d/log/ip.log"; then
        cat "$d/log/ip.log" >&2
        ht_cluster_skip "cannot create veth pairs into the namespaces"
        return 77
      fi
      nsenter -t "$sw" --net -- ip link set "n${k}e$i" master "br$i" up &&
      nsenter -t "$np" --net -- ip addr add "$HT_CLUSTER_SUBNET.$i.$k/24" dev "eth$i" &&
      nsenter -t "$np" --net -- ip link set "eth$i" up || {
        ht_cluster_skip "cannot configure node$k's eth$i"; return 77; }
    done
  done
  # Wait until node1 reaches every node (the bridge may take a moment to forward).
  local hosts=""
  for (( k=1; k<=nodes; k++ )); do hosts+="${hosts:+ }node$k"; done
  export HT_CLUSTER_HOSTS=$hosts
  for (( k=2; k<=nodes; k++ )); do
    local ok=0
    for _ in $(seq 1 50); do
      ht_cluster_exec node1 ping -c1 -W1 -q "node$k" >/dev/null 2>&1 && { ok=1; break; }
      command -v ping >/dev/null 2>&1 || { ok=1; break; }   # no ping: trust the links
      sleep 0.1
    done
    [[ $ok == 1 ]] || { ht_cluster_skip "node1 cannot reach node$k over the bridge"; return 77; }
  done
  ht_cluster_write_env
  ht_cluster_log "up: $nodes nodes ($hosts), HT_CLUSTER_DIR=$d"
}

# ht_cluster_write_env: $HT_CLUSTER_DIR/env, the environment every node's commands get.
ht_cluster_write_env() {
  cat >"$HT_CLUSTER_DIR/env" <<EOF
export HT_CLUSTER_DIR=$HT_CLUSTER_DIR
export HT_CLUSTER_HOSTS="$HT_CLUSTER_HOSTS"
export HT_CLUSTER_IFACE=eth0
export OMPI_MCA_plm_rsh_agent=$HT_CLUSTER_SRC/tests/cluster/node_rsh.sh
export OMPI_MCA_btl=vader,tcp,self
export OMPI_MCA_btl_tcp_if_include=eth0
export OMPI_MCA_oob_tcp_if_include=eth0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PRTE_MCA_plm_rsh_agent=$HT_CLUSTER_SRC/tests/cluster/node_rsh.sh
EOF
}

# ht_cluster_stop: every process on every node (TERM, KILL after 5 s), then the holders (the
# namespaces and their links go with the last process in them), then the directory. Idempotent.
ht_cluster_stop() {
  local rc=$?
  if [[ ${#HT_CLUSTER_HOLDERS[@]} -gt 0 ]]; then
    local k p left
    local nodes=$(( ${#HT_CLUSTER_HOLDERS[@]} - 1 ))
    for sig in TERM KILL; do
      for (( k=1; k<=nodes; k++ )); do ht_cluster_kill_node "$k" "$sig"; done
      for _ in $(seq 1 25); do
        left=0
        for (( k=1; k<=nodes; k++ )); do
          [[ $(ht_cluster_pids "$k" | wc -l) -gt 1 ]] && left=1
        done
        [[ $left == 0 ]] && break
        sleep 0.2
      done
      [[ $left == 0 ]] && break
    done
    for p in "${HT_CLUSTER_HOLDERS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    for p in "${HT_CLUSTER_HOLDERS[@]}"; do wait "$p" 2>/dev/null || true; done
    HT_CLUSTER_HOLDERS=()
  fi
  if [[ -n ${HT_CLUSTER_DIR:-} && -d $HT_CLUSTER_DIR ]]; then
    if [[ ${HT_CLUSTER_KEEP:-0} == 1 ]]; then
      ht_cluster_log "kept $HT_CLUSTER_DIR"
    else
      rm -rf "$HT_CLUSTER_DIR"
    fi
  fi
  HT_CLUSTER_DIR=""
  return $rc
}

# ht_cluster_head_main SLURM CMD...: runs on node1. Starts Slurm when SLURM=1 (its own EXIT trap
# stops it), then CMD.
ht_cluster_head_main() {
  local slurm=$1
  shift
  # shellcheck disable=SC1091
  source "$HT_CLUSTER_DIR/env"
  if [[ $slurm == 1 ]]; then
    # shellcheck source=../slurm/cluster.sh
    source "$HT_CLUSTER_SRC/tests/slurm/cluster.sh"
    HT_SLURM_NODES=$HT_CLUSTER_HOSTS HT_SLURM_TMP=$HT_CLUSTER_DIR HT_SLURM_CPUS=${HT_SLURM_CPUS:-2} \
      HT_SLURM_NODE_EXEC=$HT_CLUSTER_SRC/tests/cluster/node_exec.sh ht_slurm_start || exit $?
    echo "export SLURM_CONF=$SLURM_CONF" >>"$HT_CLUSTER_DIR/env"
  fi
  "$@"
}

# ht_cluster_parse_opts ARGS...: --nodes N, --slurm, --timeout S; sets opt_nodes, opt_slurm,
# opt_timeout and opt_rest (the remaining arguments).
ht_cluster_parse_opts() {
  opt_nodes=${HT_CLUSTER_NODES:-2} opt_slurm=0 opt_timeout=0 opt_rest=()
  while (( $# )); do
    case $1 in
      --nodes) opt_nodes=$2; shift 2 ;;
      --slurm) opt_slurm=1; shift ;;
      --timeout) opt_timeout=$2; shift 2 ;;
      --) shift; break ;;
      *) break ;;
    esac
  done
  opt_rest=("$@")
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  set -uo pipefail
  cmd=${1:-}
  shift || true
  case $cmd in
    run|shell)
      ht_cluster_parse_opts "$@"
      [[ $cmd == shell ]] && opt_rest=(bash -c 'echo "cluster up: enter a node with
  HT_CLUSTER_DIR=$HT_CLUSTER_DIR '"$0"' enter node1    # Ctrl-C here stops the cluster" >&2
  while sleep 3600; do :; done')
      (( ${#opt_rest[@]} )) || { echo "usage: $0 run [--nodes N] [--slurm] [--timeout S] CMD [ARGS...]" >&2; exit 2; }
      ht_cluster_start "$opt_nodes" || exit $?
      tmo=()
      [[ $opt_timeout != 0 ]] && tmo=(timeout --kill-after=10 "$opt_timeout")
      # The head runs as a child (not exec) so this shell's trap tears the cluster down afterwards.
      ht_cluster_guard=(setpriv --pdeathsig KILL)
      ht_cluster_exec node1 "${tmo[@]}" bash -c 'source "$1"; shift; ht_cluster_head_main "$@"' head \
        "$HT_CLUSTER_SRC/tests/cluster/cluster.sh" "$opt_slurm" "${opt_rest[@]}"
      rc=$?
      [[ $rc == 124 ]] && ht_cluster_log "command ran past ${opt_timeout}s"
      exit $rc
      ;;
    enter)
      node=${1:-node1}
      ht_cluster_exec "$node" bash --rcfile <(echo "source $HT_CLUSTER_DIR/env; PS1='[\h \W]# '") -i
      ;;
    exec)
      node=$1
      shift
      exec "$HT_CLUSTER_SRC/tests/cluster/node_exec.sh" "$node" bash -c 'source "$HT_CLUSTER_DIR/env"; exec "$@"' bash "$@"
      ;;
    link) ht_cluster_link "$@" ;;
    pids) ht_cluster_pids "$@" ;;
    *)
      sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//' >&2
      exit 2
      ;;
  esac
fi
