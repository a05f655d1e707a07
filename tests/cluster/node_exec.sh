#!/usr/bin/env bash
# node_exec.sh NODE CMD [ARGS...]: run CMD on NODE of the simulated cluster at $HT_CLUSTER_DIR
# (tests/cluster/cluster.sh) as this same process (exec nsenter: the caller's pid becomes CMD's, so a
# daemon started this way can be stopped by that pid). The environment is the caller's; the working
# directory too where it exists on the node. Exit status: CMD's, 255 when NODE is not a node.
node=${1:-}
shift
n=${node#node}
f=${HT_CLUSTER_DIR:-/nonexistent}/nodes/node$n/pid
[[ -f $f ]] || { echo "node_exec: no node '$node' in the cluster at '${HT_CLUSTER_DIR:-}'" >&2; exit 255; }
wd=$PWD
[[ -d $wd ]] || wd=/
exec nsenter -t "$(cat "$f")" --net --uts --mount --wd="$wd" -- "$@"
