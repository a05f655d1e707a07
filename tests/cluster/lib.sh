# Shared by the multi-node tests (tests/cluster/test_*.sh). Source it first thing: outside a cluster
# it re-runs the calling test inside a fresh one (tests/cluster/cluster.sh run, on node1, bounded by
# HT_TEST_LIMIT_S, default 240 s) and exits with its status (77: no cluster here, with the reason).
# Inside it sets: src (the repository), HT_BIN (build/hpctrain unless set), work (shared by every
# node), fail MSG (prints the logs under $work and exits 1), the flags of a small synthetic run
# (ht_small_flags) and helpers to read metrics.
# Options for the re-run come from HT_TEST_CLUSTER_OPTS (e.g. "--nodes 2 --slurm").
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
if [[ -z ${HT_CLUSTER_DIR:-} ]]; then
  # shellcheck disable=SC2086
  exec bash "$src/tests/cluster/cluster.sh" run ${HT_TEST_CLUSTER_OPTS:---nodes 2} \
    --timeout "${HT_TEST_LIMIT_S:-240}" bash "$0" "$@"
fi
set -uo pipefail
export HT_BIN=${HT_BIN:-$src/build/hpctrain}
[[ -x $HT_BIN ]] || { echo "FAIL: HT_BIN '$HT_BIN' missing" >&2; exit 1; }
work=$HT_CLUSTER_DIR/work
export OMP_NUM_THREADS=1
cd "$work" || exit 1
if [[ -n ${SLURM_CONF:-} ]]; then
  # The Slurm helpers (ht_slurm_wait_state, ht_slurm_release_requeued, ht_slurm_dump_logs).
  # shellcheck source=../slurm/cluster.sh
  source "$src/tests/slurm/cluster.sh"
  HT_SLURM_DIR=$(dirname "$SLURM_CONF")
fi

fail() {
  echo "FAIL: $*" >&2
  local f
  for f in "$work"/*.log "$work"/*.out "$work"/*.err; do [[ -f $f ]] && { echo "---- $f" >&2; tail -n 40 "$f" >&2; }; done
  [[ -n ${SLURM_CONF:-} ]] && declare -F ht_slurm_dump_logs >/dev/null && ht_slurm_dump_logs
  exit 1
}

# ht_small_flags [--key value ...]: a small synthetic mlp run (the single-host tests' dp_exactness
# setup), 20 steps, global batch 64; given pairs replace the defaults or add keys (hpctrain refuses
# an option given twice). Writes $work/small.ini, the near-empty config train.sbatch needs.
ht_small_flags() {
  [[ -f $work/small.ini ]] || printf '# tests/cluster: everything on the command line\n[run]\nseed = 7\n' >"$work/small.ini"
  local -A v=([--config]="$work/small.ini" [--data.synthetic]=true [--data.synthetic_samples]=2048
    [--data.synthetic_height]=8 [--data.synthetic_width]=8 [--data.synthetic_channels]=1 [--model.name]=mlp
    [--model.mlp_hidden]=32 [--run.seed]=7 [--train.device]=cpu [--train.threads]=1
    [--train.log_every_steps]=10 [--train.global_batch]=64 [--train.max_steps]=20 [--train.epochs]=0
    [--optim.lr]=0.05)
  while (( $# >= 2 )); do v[$1]=$2; shift 2; done
  local k
  for k in "${!v[@]}"; do printf '%s %s ' "$k" "${v[$k]}"; done
  echo
}

# ht_mpirun HOSTS LOG ARGS...: mpirun across the cluster (e.g. HOSTS=node1:2,node2:2), output to LOG.
ht_mpirun() {
  local hosts=$1 log=$2
  shift 2
  mpirun --bind-to none --host "$hosts" "$@" >"$log" 2>&1
}

# ht_losses RUN_DIR: the step losses of metrics.jsonl, one per line.
ht_losses() {
  /usr/bin/python3 -c '
import json, sys
for line in open(sys.argv[1] + "/metrics.jsonl"):
    r = json.loads(line)
    if r["event"] == "step": print(repr(r["loss"]))' "$1"
}

# ht_compare_losses A B [REL]: every step loss of run A equals run B within REL (1e-5), same count.
ht_compare_losses() {
  /usr/bin/python3 - "$1" "$2" "${3:-1e-5}" <<'PY'
import json, sys
def losses(d):
    return [r["loss"] for r in map(json.loads, open(d + "/metrics.jsonl")) if r["event"] == "step"]
a, b, tol = losses(sys.argv[1]), losses(sys.argv[2]), float(sys.argv[3])
if not a or len(a) != len(b):
    sys.exit(f"{sys.argv[1]}: {len(a)} steps, {sys.argv[2]}: {len(b)} steps")
for i, (x, y) in enumerate(zip(a, b)):
    if abs(x - y) > tol * abs(x):
        sys.exit(f"step {i + 1}: {sys.argv[1]} loss {x} vs {sys.argv[2]} loss {y}")
PY
}

# ht_tx_bytes NODE: bytes sent so far on NODE's cluster interface (netlink counters: per namespace).
ht_tx_bytes() {
  "$src/tests/cluster/node_exec.sh" "$1" ip -s -j link show eth0 |
    /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["stats64"]["tx"]["bytes"])'
}
