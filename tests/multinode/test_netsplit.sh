#!/usr/bin/env bash
# Issue 14 item 4: the network splits. 4 ranks on node1 and node2 train (dist.timeout_s = 10); mid-step
# node2's cable is pulled and left out. Every rank on both sides must exit within dist.timeout_s plus
# the stated grace (10 s), each naming the peers it lost with their host: ranks 0, 1 name node2 (ranks
# 2, 3), ranks 2, 3 name node1 (ranks 0, 1). Before the collective guard no rank ended at all.
# mpirun itself cannot reach node2's daemon any more and does not return (Open MPI 4.1 waits for its
# TCP keepalive, about 8 minutes): that is recorded, and the test ends it and node2's daemon by pid.
HT_TEST_CLUSTER_OPTS="--nodes 2" HT_TEST_LIMIT_S=${HT_TEST_LIMIT_S:-150}
source "$(dirname "$0")/failures_lib.sh"

d=$work/split
long_run "$d" node1:2,node2:2 split.log
wait_steps "$d" 30 60
mapfile -t p1 < <(rank_pids node1)
mapfile -t p2 < <(rank_pids node2)
(( ${#p1[@]} == 2 && ${#p2[@]} == 2 )) || fail "expected 2 ranks per node, found node1: ${p1[*]}, node2: ${p2[*]}"
T0=$EPOCHREALTIME
ht_cluster_link node2 down
limit=$((TIMEOUT_S + GRACE_S + SLACK_S))
gone=$(wait_gone "$limit" "${p1[@]}" "${p2[@]}")
ok=$?
echo "link down at step $(steps_logged "$d"); rank exits (pid seconds): $(echo "$gone" | tr '\n' ' ')"
mpirun_state=$(kill -0 "$MPIRUN_PID" 2>/dev/null && echo "still running" || echo "ended")
stop_mpirun
ht_cluster_kill_node node2 KILL  # its orted, cut off
(( ok == 0 )) || fail "ranks still running $limit s after the link went down: $(for p in "${p1[@]}" "${p2[@]}"; do [[ -d /proc/$p ]] && echo -n "$p "; done)"
worst=$(echo "$gone" | awk '{ if ($2 > m) m = $2 } END { print m }')
for r in 0 1; do
  rank_log "$d" $r | grep -q "fatal (rank $r on node1).*lost peers.*node2 (ranks 2, 3)" ||
    fail "rank $r does not name node2 (ranks 2, 3) as lost: $(rank_log "$d" $r | grep -i fatal)"
done
for r in 2 3; do
  rank_log "$d" $r | grep -q "fatal (rank $r on node2).*lost peers.*node1 (ranks 0, 1)" ||
    fail "rank $r does not name node1 (ranks 0, 1) as lost: $(rank_log "$d" $r | grep -i fatal)"
done
sleep 1
left="$(leftover node1)$(leftover node2)"
[[ -z $left ]] || fail "processes left: $left"
echo "PASS: every rank exited within $worst s of the split (limit $TIMEOUT_S + $GRACE_S s), each naming the" \
  "other node's ranks; mpirun $mpirun_state when the last rank had gone"
