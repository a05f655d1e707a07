#!/usr/bin/env bash
# Open MPI's plm_rsh_agent for the simulated cluster (tests/cluster/cluster.sh): called as ssh would be,
# `node_rsh.sh HOST COMMAND...`, it runs COMMAND with /bin/sh in HOST's namespaces (network, hostname,
# mount) instead of logging in. HOST is a node name (node2) or its address (10.213.0.2).
# Needs HT_CLUSTER_DIR (mpirun passes its environment on to the agent). Exit status: COMMAND's, 255
# when HOST is not a node of the cluster (as ssh does for an unknown host).
host=${1:-}
shift
[[ -n ${HT_CLUSTER_DIR:-} ]] || { echo "node_rsh: HT_CLUSTER_DIR is not set" >&2; exit 255; }
name=$host
if [[ ! -f $HT_CLUSTER_DIR/nodes/$name/pid ]]; then
  name=$(awk -v h="$host" '$1 == h || $2 == h { print $2; exit }' "$HT_CLUSTER_DIR/hosts")
fi
if [[ -z $name || ! -f $HT_CLUSTER_DIR/nodes/$name/pid ]]; then
  echo "node_rsh: Could not resolve hostname $host: not a node of the cluster at $HT_CLUSTER_DIR" >&2
  exit 255
fi
pid=$(cat "$HT_CLUSTER_DIR/nodes/$name/pid")
wd=$PWD
[[ -d $wd ]] || wd=/
exec nsenter -t "$pid" --net --uts --mount --wd="$wd" -- /bin/sh -c "$*"
