#!/usr/bin/env bash
# The collective guard where UDP between nodes is blocked (docs/exit_codes.md#lost-peers): node2 drops
# every UDP datagram arriving from outside it (iptables in its network namespace; TCP, and so MPI, still
# flows). 4 ranks on node1 and node2 train (dist.timeout_s = 10). Required:
#   - at start-up, rank 1 (whose neighbour is rank 2 on node2) and rank 3 (whose neighbour is rank 0 on
#     node1, whose answer node2 drops) each warn that the UDP probe got no answer and that lost peers
#     are probed over MPI instead; ranks 0 and 2 do not warn;
#   - the run trains;
#   - then node2's ranks are SIGSTOPped (a hung node whose network still works): ranks 0 and 1 exit 1
#     within dist.timeout_s + 10 s, each naming node2 (ranks 2, 3) from the MPI probe; mpirun returns
#     non-zero; nothing is left on either node.
HT_TEST_CLUSTER_OPTS="--nodes 2" HT_TEST_LIMIT_S=${HT_TEST_LIMIT_S:-150}
source "$(dirname "$0")/failures_lib.sh"
command -v iptables >/dev/null || { echo "SKIP: no iptables" >&2; exit 77; }

ht_cluster_exec node2 iptables -A INPUT ! -i lo -p udp -j DROP || fail "iptables in node2's namespace"
d=$work/udp
long_run "$d" node1:2,node2:2 udp.log
wait_steps "$d" 20 90
for r in 1 3; do
  grep -q "^hpctrain: warning (rank $r on node[12]): rank $(( (r + 1) % 4 )) on node[12] did not answer a UDP probe.*probed over MPI instead" "$d.rank$r.err" ||
    fail "rank $r did not warn that UDP probes do not get through: $(grep -h warning "$d.rank$r.err")"
done
grep -h "^hpctrain: warning" "$d.rank1.err" | sed 's/^/  rank 1: /'
for r in 0 2; do
  ! grep -q "UDP probe" "$d.rank$r.err" || fail "rank $r warned although its neighbour answered: $(grep -h warning "$d.rank$r.err")"
done
rank_pids_2x2
if ! signal_node2_ranks "$d" STOP stopped "pid seconds, mpirun is $MPIRUN_PID" "${p1[@]}" "$MPIRUN_PID"; then
  stop_mpirun
  ht_cluster_kill_node node2 KILL
  fail "node1's ranks or mpirun still running $limit s after node2's ranks stopped"
fi
wait "$MPIRUN_PID"
rc=$?
(( rc != 0 )) || fail "mpirun returned 0"
for r in 0 1; do
  grep -q "^hpctrain: fatal (rank $r on node1).*lost peers.*node2 (ranks 2, 3)" "$d.rank$r.err" ||
    fail "rank $r does not name node2 (ranks 2, 3) as lost: $(grep -h -E '^hpctrain: (fatal|rank)' "$d.rank$r.err")"
done
kill -CONT "${p2[@]}" 2>/dev/null
sleep 1
left="$(leftover node1)$(leftover node2)"
[[ -z $left ]] || { ht_cluster_kill_node node2 KILL; fail "processes left: $left"; }
worst=$(echo "$gone" | grep -v "^$MPIRUN_PID " | awk '{ if ($2 > m) m = $2 } END { print m }')
echo "PASS: with UDP dropped by node2, ranks 1 and 3 warned at start-up; after node2's ranks stopped," \
  "ranks 0 and 1 named node2 (ranks 2, 3) over the MPI probe and exited within $worst s (limit" \
  "$TIMEOUT_S + $GRACE_S s); mpirun returned $rc; nothing left"
