#!/usr/bin/env bash
# Issue 14 item 4: the network splits. 4 ranks on node1 and node2 train (dist.timeout_s = 10); mid-step
# node2's cable is pulled and left out. Every rank on both sides must exit within dist.timeout_s plus
# the stated grace (10 s), each naming the peers it lost with their host: ranks 0, 1 name node2 (ranks
# 2, 3), ranks 2, 3 name node1 (ranks 0, 1) (by the collective guard's time limit, or by its quick
# probe on the SIGTERM of Open MPI ending the job). Before the collective guard no rank ended at all.
# mpirun must return non-zero within the same bound, and node2's daemon end by itself: with Open MPI's
# out-of-band TCP keepalive lowered below dist.timeout_s (OMPI_MCA_oob_tcp_keepalive_*: 5 s idle, then
# 3 probes 2 s apart, as docs/exit_codes.md#lost-peers advises) mpirun and node2's daemon each see the
# other lost and end the job; with Open MPI's defaults (300 s, 9 x 20 s) mpirun waited about 8 minutes.
HT_TEST_CLUSTER_OPTS="--nodes 2" HT_TEST_LIMIT_S=${HT_TEST_LIMIT_S:-150}
source "$(dirname "$0")/failures_lib.sh"

export OMPI_MCA_oob_tcp_keepalive_time=${OMPI_MCA_oob_tcp_keepalive_time:-5}
export OMPI_MCA_oob_tcp_keepalive_intvl=${OMPI_MCA_oob_tcp_keepalive_intvl:-2}
export OMPI_MCA_oob_tcp_keepalive_probes=${OMPI_MCA_oob_tcp_keepalive_probes:-3}
d=$work/split
long_run "$d" node1:2,node2:2 split.log
wait_steps "$d" 30 60
rank_pids_2x2
T0=$EPOCHREALTIME
ht_cluster_link node2 down
limit=$((TIMEOUT_S + GRACE_S + SLACK_S))
gone=$(wait_gone "$limit" "${p1[@]}" "${p2[@]}" "$MPIRUN_PID")
ok=$?
echo "link down at step $(steps_logged "$d"); exits (pid seconds, mpirun is $MPIRUN_PID): $(echo "$gone" | tr '\n' ' ')"
if (( ok != 0 )); then
  left=$(for p in "${p1[@]}" "${p2[@]}" "$MPIRUN_PID"; do [[ -d /proc/$p ]] && echo -n "$p "; done)
  stop_mpirun
  ht_cluster_kill_node node2 KILL  # its daemon, cut off
  fail "ranks or mpirun ($MPIRUN_PID) still running $limit s after the link went down: $left"
fi
wait "$MPIRUN_PID"
rc=$?
(( rc != 0 )) || fail "mpirun returned 0 after the split"
worst=$(echo "$gone" | grep -v "^$MPIRUN_PID " | awk '{ if ($2 > m) m = $2 } END { print m }')
mpirun_s=$(echo "$gone" | grep "^$MPIRUN_PID " | cut -d' ' -f2)
# named R SELF OTHER: rank R's stderr names OTHER as lost (its own time limit, or the probe on a stop signal).
named() {
  rank_log "$d" "$1" | grep -q -E "^hpctrain: (fatal \(rank $1 on $2\).*lost peers|rank $1: stop signal).*$3" ||
    fail "rank $1 does not name $3 as lost: $(rank_log "$d" "$1" | grep -E '^hpctrain: (fatal|rank)')"
}
for r in 0 1; do named $r node1 "node2 \(ranks 2, 3\)"; done
for r in 2 3; do named $r node2 "node1 \(ranks 0, 1\)"; done
sleep 1
left="$(leftover node1)$(leftover node2)"
[[ -z $left ]] || { ht_cluster_kill_node node2 KILL; fail "processes left: $left"; }
echo "PASS: every rank exited within $worst s of the split (limit $TIMEOUT_S + $GRACE_S s), each naming the" \
  "other node's ranks; mpirun returned $rc after $mpirun_s s; nothing left on either node"
