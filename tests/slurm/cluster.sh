#!/usr/bin/env bash
# Single-node Slurm cluster on localhost for the sbatch tests: root, no systemd, everything in a
# private temporary directory (munged with its own key and socket, slurmctld -D and slurmd -D
# started in the background, clients pointed at the config through SLURM_CONF).
#
# Two ways to use it:
#   source tests/slurm/cluster.sh; ht_slurm_start || exit $?   # then sbatch/squeue/... just work;
#       the EXIT trap it installs stops the daemons by the process ids it started and removes the
#       directory, also when the test fails or is interrupted.
#   bash tests/slurm/cluster.sh run CMD [ARGS...]              # runs CMD inside a fresh cluster
#   bash tests/slurm/cluster.sh shell                          # interactive: prints SLURM_CONF, waits
#
# Why each setting: proctrack/linuxproc and task/none need no cgroups (none writable here);
# select/cons_tres schedules single CPUs; SlurmdParameters=config_overrides lets the node claim
# HT_SLURM_CPUS CPUs (default 8, one "GPU slot" each) on a 2-core machine; JobRequeue=1 allows
# `scontrol requeue`; munge cred_expire=10 keeps the requeue delay short; MailProg=/bin/true since
# no mailer exists; MinJobAge=4 keeps `sbatch --wait` polling every 2 s (it backs off up to
# MinJobAge/2); gres gpu:HT_SLURM_CPUS (counts only, no device files) lets scripts that ask for
# --gpus-per-node run unchanged on CPU.
#
# If Slurm cannot start (not root, packages missing, a daemon fails) ht_slurm_start prints the
# reason and returns 77, the ctest skip code: a test is skipped, never passed silently.
#
# Environment: HT_SLURM_CPUS (8, per node), HT_SLURM_KEEP=1 keeps the directory for debugging,
# HT_SLURM_TMP (parent of the private directory, default $TMPDIR or /tmp), HT_SLURMD_TIMEOUT
# (SlurmdTimeout, 30 s: how long slurmctld waits for a silent slurmd before it sets the node DOWN and
# kills its jobs as NODE_FAIL; Slurm's default is 300; tests/multinode/test_netsplit_srun.sh).
# Several nodes (the simulated cluster, tests/cluster/cluster.sh --slurm): HT_SLURM_NODES="node1 node2"
# (names /etc/hosts resolves; slurmctld runs here, on the first) and HT_SLURM_NODE_EXEC, a command
# that runs `HT_SLURM_NODE_EXEC NODE CMD...` on NODE as CMD's own process (so its pid is the daemon's).
# Each slurmd then has its own hostname, and TmpFS/PMIx directory in the node's private /tmp.

HT_SLURM_DIR=""
HT_SLURM_PIDS=()

ht_slurm_log() { echo "[slurm-cluster] $*" >&2; }

# ht_slurm_skip REASON: print the reason (and daemon log tails) and return 77.
ht_slurm_skip() {
  ht_slurm_log "SKIP: $*"
  local f
  for f in "$HT_SLURM_DIR"/log/*.log; do
    [[ -s "$f" ]] || continue
    echo "---- tail $f" >&2
    tail -n 15 "$f" >&2
  done
  ht_slurm_stop
  return 77
}

# ht_slurm_free_port: a TCP port nobody listens on (two clusters may run at once).
ht_slurm_free_port() {
  local p
  for _ in $(seq 1 50); do
    p=$(( 20000 + RANDOM % 20000 ))
    # Nothing answers on it (bash's /dev/tcp; iproute2's ss is not on every minimal image).
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "$p"
      return 0
    fi
  done
  return 1
}

ht_slurm_start() {
  local cpus=${HT_SLURM_CPUS:-8}
  local nodes=(${HT_SLURM_NODES:-localhost})
  local multi=0
  [[ ${nodes[*]} != localhost ]] && multi=1
  if [[ $(id -u) -ne 0 ]]; then
    ht_slurm_skip "needs root (slurmd runs jobs as their user; this harness runs everything as root)"
    return 77
  fi
  local b
  for b in munged mungekey munge unmunge slurmctld slurmd sbatch srun scontrol squeue sinfo scancel; do
    command -v "$b" >/dev/null 2>&1 || PATH=$PATH:/usr/sbin:/sbin
    if ! command -v "$b" >/dev/null 2>&1; then
      ht_slurm_skip "'$b' not found: install slurmctld slurmd slurm-client munge (HT_WITH_SLURM=1 scripts/install_deps.sh)"
      return 77
    fi
  done

  HT_SLURM_DIR=$(mktemp -d "${HT_SLURM_TMP:-${TMPDIR:-/tmp}}/ht-slurm.XXXXXX") || {
    ht_slurm_skip "cannot create a temporary directory"; return 77; }
  chmod 700 "$HT_SLURM_DIR"
  trap ht_slurm_stop EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  local d=$HT_SLURM_DIR
  mkdir -p "$d"/{munge,log,state,run,tmp}
  local n
  for n in "${nodes[@]}"; do mkdir -p "$d/spool/$n"; done
  chmod 700 "$d/munge"

  # munged: own key, socket, pid and seed files. --force tolerates a world-writable /tmp parent.
  mungekey --create --keyfile="$d/munge/munge.key" >/dev/null 2>&1 ||
    dd if=/dev/urandom of="$d/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$d/munge/munge.key"
  # Daemons die with this shell even when it is SIGKILLed (a ctest timeout), where no trap runs.
  local guard=()
  setpriv --pdeathsig KILL true 2>/dev/null && guard=(setpriv --pdeathsig KILL)
  "${guard[@]}" munged -F --force --key-file="$d/munge/munge.key" --socket="$d/munge/munge.sock" \
    --pid-file="$d/munge/munged.pid" --seed-file="$d/munge/munged.seed" \
    --log-file="$d/log/munged.log" >"$d/log/munged.out" 2>&1 &
  HT_SLURM_PIDS+=($!)
  local i
  for i in $(seq 1 50); do
    [[ -S "$d/munge/munge.sock" ]] && break
    kill -0 "${HT_SLURM_PIDS[0]}" 2>/dev/null || break
    sleep 0.1
  done
  if ! munge -S "$d/munge/munge.sock" -n 2>/dev/null | unmunge -S "$d/munge/munge.sock" >/dev/null 2>&1; then
    cat "$d/log/munged.out" >&2 2>/dev/null
    ht_slurm_skip "munged did not start or does not encode/decode credentials"
    return 77
  fi

  local ctld_port slurmd_port host i
  ctld_port=$(ht_slurm_free_port) && slurmd_port=$(ht_slurm_free_port) || {
    ht_slurm_skip "no free TCP port"; return 77; }
  [[ $ctld_port == "$slurmd_port" ]] && slurmd_port=$((ctld_port + 1))
  # slurmctld only runs on a host named in SlurmctldHost, so use this machine's short name and
  # pin its address to loopback.
  host=$(hostname -s)
  local ctld_addr=127.0.0.1 tmpfs=${d}/tmp
  if [[ $multi == 1 ]]; then
    host=${nodes[0]}
    ctld_addr=$(getent hosts "$host" | awk '{print $1; exit}')
    [[ -n $ctld_addr ]] || { ht_slurm_skip "cannot resolve node '$host'"; return 77; }
    [[ $(hostname) == "$host" ]] || { ht_slurm_skip "slurmctld must start on $host, this is $(hostname)"; return 77; }
    # Per node: each node's /tmp is its own, so the same path is a different directory on each.
    tmpfs=/tmp/ht-slurm-tmp
    for n in "${nodes[@]}"; do "$HT_SLURM_NODE_EXEC" "$n" mkdir -p "$tmpfs" || {
      ht_slurm_skip "cannot run on node $n through HT_SLURM_NODE_EXEC"; return 77; }; done
  fi
  : >"$d/plugstack.conf"
  # PMIx puts per-step directories named after uid, job and step ids (spmix_appdir_0_1.0) under
  # TmpFS (/tmp by default): every fresh cluster numbers jobs from 1, so concurrent or leftover
  # clusters would collide there. Both go into the private directory.
  echo "PMIxCliTmpDirBase=${tmpfs}" >"$d/mpi.conf"
  # Countable GPUs without device files, so scripts that ask for --gpus-per-node run unchanged.
  # slurmd drops file-less GPUs and wants device files: each gets a null character device
  # (an empty file where mknod is not allowed; slurmd then logs an error but counts it).
  mkdir -p "$d/dev"
  for (( i=0; i<cpus; i++ )); do mknod "$d/dev/gpu$i" c 1 3 2>/dev/null || : >"$d/dev/gpu$i"; done
  : >"$d/gres.conf"
  for n in "${nodes[@]}"; do echo "NodeName=$n Name=gpu File=${d}/dev/gpu[0-$((cpus-1))]" >>"$d/gres.conf"; done
  local node_lines="" nodelist
  nodelist=$(IFS=,; echo "${nodes[*]}")
  for n in "${nodes[@]}"; do
    local addr=127.0.0.1 nh=$host
    if [[ $multi == 1 ]]; then
      addr=$(getent hosts "$n" | awk '{print $1; exit}')
      nh=$n
    fi
    node_lines+="NodeName=$n NodeHostname=$nh NodeAddr=$addr CPUs=${cpus} RealMemory=1000 Gres=gpu:${cpus} State=UNKNOWN"$'\n'
  done
  cat >"$d/slurm.conf" <<EOF
ClusterName=htcluster
SlurmctldHost=${host}(${ctld_addr})
SlurmctldPort=${ctld_port}
SlurmdPort=${slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=${d}/munge/munge.sock,cred_expire=10
StateSaveLocation=${d}/state
TmpFS=${tmpfs}
SlurmdSpoolDir=${d}/spool/%n
SlurmctldPidFile=${d}/run/slurmctld.pid
SlurmdPidFile=${d}/run/slurmd-%n.pid
SlurmctldLogFile=${d}/log/slurmctld.log
SlurmdLogFile=${d}/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=${d}/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=none
JobRequeue=1
MailProg=/bin/true
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$d/jobcomp.txt
InactiveLimit=0
KillWait=5
MinJobAge=4
SlurmctldTimeout=30
SlurmdTimeout=${HT_SLURMD_TIMEOUT:-30}
Waittime=0
GresTypes=gpu
${node_lines}PartitionName=debug Nodes=${nodelist} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
  export SLURM_CONF="$d/slurm.conf"
  # Jobs run as root here: let mpirun inside them (test harness only, as tests/CMakeLists.txt does).
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  # Jobs must not inherit a Slurm context from an enclosing allocation.
  unset SLURM_JOB_ID SLURM_JOBID SLURM_NODELIST SLURM_NTASKS SLURM_PROCID

  "${guard[@]}" slurmctld -D -i -f "$SLURM_CONF" >"$d/log/slurmctld.out" 2>&1 &
  HT_SLURM_PIDS+=($!)
  for n in "${nodes[@]}"; do
    local on=()
    [[ $multi == 1 ]] && on=("$HT_SLURM_NODE_EXEC" "$n")
    "${guard[@]}" "${on[@]}" slurmd -D -N "$n" -f "$SLURM_CONF" >"$d/log/slurmd-$n.out" 2>&1 &
    HT_SLURM_PIDS+=($!)
  done

  # Ready when every node is idle; give up after 30 s.
  local state="" idle=0
  for i in $(seq 1 150); do
    state=$(sinfo -h -N -o '%T' 2>/dev/null | sort | uniq -c | xargs || true)
    idle=$(sinfo -h -N -t idle -o '%N' 2>/dev/null | wc -l)
    (( idle == ${#nodes[@]} )) && break
    local p
    for p in "${HT_SLURM_PIDS[@]}"; do
      if ! kill -0 "$p" 2>/dev/null; then
        cat "$d"/log/*.out >&2 2>/dev/null
        ht_slurm_skip "a Slurm daemon exited during startup (pid $p)"
        return 77
      fi
    done
    sleep 0.2
  done
  if (( idle != ${#nodes[@]} )); then
    ht_slurm_skip "nodes '${nodes[*]}' not all idle after 30 s (states '${state}')"
    return 77
  fi
  ht_slurm_log "up: SLURM_CONF=$SLURM_CONF (slurmctld :$ctld_port, slurmd :$slurmd_port, ${#nodes[@]} node(s) x $cpus CPUs)"
  return 0
}

# ht_slurm_stop: cancel jobs, then stop the daemons by the process ids started above (their pid
# files vanish early); SIGKILL whatever is left after 10 s. Idempotent.
# For the tests that drive the real hpctrain: sets src (the repository) and HT_BIN (default
# build/hpctrain, must exist), starts the cluster and makes $work inside it. Returns ht_slurm_start's
# status (77 when Slurm cannot start), 1 when the binary is missing. Inside the simulated cluster
# (tests/cluster/cluster.sh --slurm: HT_CLUSTER_DIR and SLURM_CONF set) it uses that cluster's Slurm
# and $HT_CLUSTER_DIR/work (shared by the nodes) instead of starting one.
ht_slurm_test_begin() {
  src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  HT_BIN=${HT_BIN:-$src/build/hpctrain}
  [[ -x $HT_BIN ]] || { echo "FAIL: HT_BIN '$HT_BIN' missing" >&2; return 1; }
  if [[ -n ${HT_CLUSTER_DIR:-} && -n ${SLURM_CONF:-} ]]; then
    HT_SLURM_DIR=$(dirname "$SLURM_CONF")
    work=$HT_CLUSTER_DIR/work
    mkdir -p "$work"
    return 0
  fi
  ht_slurm_start || return $?
  work=$HT_SLURM_DIR/work
  mkdir -p "$work"
}

# Debian's Fashion-MNIST as 2 train shards in $work/fmnist (log in $work/prepare.log).
ht_slurm_prepare_fmnist() {
  "$HT_BIN" prepare --format fashion-mnist --input /usr/share/datasets/fashion-mnist --output "$work/fmnist" \
    --shards 2 >"$work/prepare.log" 2>&1 || { cat "$work/prepare.log"; return 1; }
}

# For the tests that submit slurm/train.sbatch: ht_slurm_test_begin, then fail MSG (ht_slurm_fail
# with the job logs), the prepared $work/fmnist, and HT_BIN and OMP_NUM_THREADS=1 exported to the
# jobs. Returns ht_slurm_test_begin's status; exits 1 when prepare fails.
ht_slurm_train_test_begin() {
  ht_slurm_test_begin || return $?
  fail() { ht_slurm_fail "$*"; }
  ht_slurm_prepare_fmnist || fail "hpctrain prepare"
  export HT_BIN OMP_NUM_THREADS=1
}

ht_slurm_stop() {
  local rc=$?
  if [[ ${#HT_SLURM_PIDS[@]} -gt 0 ]]; then
    if [[ -n ${SLURM_CONF:-} && -f $SLURM_CONF ]]; then
      timeout 5 scancel --full --quiet --user=root >/dev/null 2>&1 || true
      sleep 0.5
    fi
    local p i
    # slurmd, then slurmctld, then munged: reverse start order.
    for (( i=${#HT_SLURM_PIDS[@]}-1; i>=0; i-- )); do
      kill -TERM "${HT_SLURM_PIDS[$i]}" 2>/dev/null || true
    done
    for _ in $(seq 1 50); do
      local alive=0
      for p in "${HT_SLURM_PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
      [[ $alive == 0 ]] && break
      sleep 0.2
    done
    for p in "${HT_SLURM_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    for p in "${HT_SLURM_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    HT_SLURM_PIDS=()
  fi
  if [[ -n $HT_SLURM_DIR && -d $HT_SLURM_DIR ]]; then
    if [[ ${HT_SLURM_KEEP:-0} == 1 || ( $rc -ne 0 && ${HT_SLURM_KEEP_ON_FAIL:-0} == 1 ) ]]; then
      ht_slurm_log "kept $HT_SLURM_DIR"
    else
      rm -rf "$HT_SLURM_DIR"
    fi
  fi
  HT_SLURM_DIR=""
  return $rc
}

# ht_slurm_dump_logs: tails of the daemon logs, for a failing test's output.
ht_slurm_dump_logs() {
  local f
  # The daemons' *.out repeat their *.log; munged logs startup problems to its *.out only.
  for f in "$HT_SLURM_DIR"/log/*.log "$HT_SLURM_DIR"/log/munged.out; do
    [[ -s "$f" ]] || continue
    echo "---- tail $f" >&2
    tail -n 30 "$f" >&2
  done
}

# ht_slurm_fail MESSAGE [LOG_GLOB...]: prints MESSAGE, the last 80 lines of each job output or log
# matching the globs (default "$work"/*.out) and the daemon logs, then exits 1.
ht_slurm_fail() {
  local msg=$1 f
  shift
  (( $# )) || set -- "$work"/*.out
  echo "FAIL: $msg" >&2
  for f in "$@"; do [[ -f $f ]] && { echo "---- $f" >&2; tail -n 80 "$f" >&2; }; done
  ht_slurm_dump_logs
  exit 1
}

# ht_slurm_job_state JOBID: the job's state; once slurmctld has forgotten an ended job (MinJobAge=4
# above), the state of its last run in the job completion log (jobcomp.txt), so a job that ended
# while a test waited on another one is still found ended.
ht_slurm_job_state() {
  local st
  st=$(scontrol show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p' | head -1)
  [[ -z $st && -f $HT_SLURM_DIR/jobcomp.txt ]] &&
    st=$(grep "^JobId=$1 " "$HT_SLURM_DIR/jobcomp.txt" | tail -n 1 | sed -n 's/.* JobState=\([A-Z_]*\).*/\1/p')
  echo "$st"
}

# ht_slurm_wait_state JOBID REGEX TIMEOUT_S: wait until the job's state matches.
ht_slurm_wait_state() {
  local job=$1 re=$2 t=${3:-60} st=""
  for _ in $(seq 1 $(( t * 5 ))); do
    st=$(ht_slurm_job_state "$job")
    [[ $st =~ $re ]] && { echo "$st"; return 0; }
    sleep 0.2
  done
  echo "$st"
  return 1
}

# ht_slurm_release_requeued JOBID...: start requeued (pending) jobs now instead of after the
# BeginTime hold slurmctld sets (about cred_expire). slurmd refuses a job whose credential is from
# the same second as the revocation of the previous run's ("Job credential revoked"), hence the
# 2 s pause after the requeue.
ht_slurm_release_requeued() {
  sleep 2
  local j
  for j in "$@"; do scontrol update JobId="$j" StartTime=now >/dev/null 2>&1 || true; done
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  set -uo pipefail
  case "${1:-}" in
    run)
      shift
      ht_slurm_start || exit $?
      "$@"
      exit $?
      ;;
    shell)
      ht_slurm_start || exit $?
      echo "export SLURM_CONF=$SLURM_CONF   # Ctrl-C stops the cluster"
      while sleep 3600; do :; done
      ;;
    *)
      echo "usage: $0 run CMD [ARGS...] | shell   (or source it and call ht_slurm_start)" >&2
      exit 2
      ;;
  esac
fi
