#!/usr/bin/env bash
# Issue 14 item 3: a node dies. 4 ranks on node1 and node2 train (dist.timeout_s = 10, a checkpoint
# every 20 steps); mid-step every process on node2 (its ranks and its Open MPI daemon) is SIGKILLed.
# The survivors must exit within dist.timeout_s plus the stated grace (10 s); mpirun returns non-zero
# in that time (here Open MPI ends the job itself: node2's daemon was started through a local rsh agent
# whose end it sees at once; whether a message names node2 is reported, see "Known gap"); no
# hpctrain/orted/mpirun process is left on either node; the newest checkpoint is intact and a rerun on
# node1 alone (2 ranks, same global batch) resumes from it with the same sample stream: every step
# loss within 1e-5 relative of an uninterrupted 2-rank run on node1.
HT_TEST_CLUSTER_OPTS="--nodes 2" HT_TEST_LIMIT_S=${HT_TEST_LIMIT_S:-240}
source "$(dirname "$0")/failures_lib.sh"

d=$work/dies
long_run "$d" node1:2,node2:2 dies.log
wait_steps "$d" 50 90
mapfile -t p1 < <(rank_pids node1)
mapfile -t p2 < <(rank_pids node2)
(( ${#p1[@]} == 2 && ${#p2[@]} == 2 )) || fail "expected 2 ranks per node, found node1: ${p1[*]}, node2: ${p2[*]}"
T0=$EPOCHREALTIME
ht_cluster_kill_node node2 KILL
limit=$((TIMEOUT_S + GRACE_S + SLACK_S))
gone=$(wait_gone "$limit" "${p1[@]}" "$MPIRUN_PID")
ok=$?
echo "node2 killed at step $(steps_logged "$d"); exits (pid seconds, the last is mpirun): $(echo "$gone" | tr '\n' ' ')"
if (( ok != 0 )); then
  stop_mpirun
  fail "survivors or mpirun still running $limit s after node2 died"
fi
wait "$MPIRUN_PID"
rc=$?
(( rc != 0 )) || fail "mpirun returned 0 after node2 died"
out=$(cat dies.log; rank_log "$d" 0; rank_log "$d" 1)
# Known gap (docs/exit_codes.md#lost-peers): when Open MPI ends the job on the daemon's loss first, its
# message does not always name the host ("ORTE was unable to reliably start one or more daemons"), and
# the survivors' own note has not been seen: reported, not failed.
grep -q -E "node2 \(ranks 2, 3\)|node:? +node2|on node node2" <<<"$out" ||
  echo "NOTE: no message names the lost host node2: $(grep -v -e '^\[epoch' -e ' = ' <<<"$out" | grep -m1 ORTE)"
named=$(grep -c "node2 (ranks 2, 3)" <<<"$out")
sleep 1
left="$(leftover node1)$(leftover node2)"
[[ -z $left ]] || fail "processes left: $left"

# The newest checkpoint is intact: a 2-rank rerun on node1 resumes from it and continues the stream.
latest_file=$(cat "$d/LATEST") || fail "no LATEST in $d"
latest=$(sed -n 's/.*step-0*\([0-9][0-9]*\)\.h5$/\1/p' <<<"$latest_file")
[[ -n $latest ]] || fail "LATEST names '$latest_file'"
"$HT_BIN" inspect "$d/$latest_file" >inspect.log 2>&1 || fail "hpctrain inspect rejects the newest checkpoint $latest_file"
end=$((latest + 30))
# shellcheck disable=SC2046
ht_mpirun node1:2 resume.log "$HT_BIN" train $(ht_small_flags --run.dir "$d" --data.synthetic_samples 400000 \
  --train.max_steps "$end" --optim.schedule constant --dist.timeout_s "$TIMEOUT_S" --checkpoint.every_steps 20) ||
  fail "the rerun on node1 failed"
grep -q "resumed from .*step $latest,.*saved with world_size 4, now 2" resume.log || fail "the rerun did not resume from step $latest"
# shellcheck disable=SC2046
ht_mpirun node1:2 ref.log "$HT_BIN" train $(ht_small_flags --run.dir "$work/ref" --data.synthetic_samples 400000 \
  --train.max_steps "$end" --optim.schedule constant --dist.timeout_s "$TIMEOUT_S") || fail "the reference run failed"
/usr/bin/python3 - "$d" "$work/ref" "$end" <<'PY' || fail "the resumed run's losses differ from the uninterrupted run"
import json, sys
def losses(d):  # the last record of each step (the rerun repeats the steps after the checkpoint)
    return {r["step"]: r["loss"] for r in map(json.loads, open(d + "/metrics.jsonl")) if r["event"] == "step"}
a, b, end = losses(sys.argv[1]), losses(sys.argv[2]), int(sys.argv[3])
assert sorted(a) == list(range(1, end + 1)), f"steps logged: {sorted(a)[:3]}..{sorted(a)[-3:]}"
for s in range(1, end + 1):
    assert abs(a[s] - b[s]) <= 1e-5 * abs(b[s]), f"step {s}: {a[s]} vs {b[s]}"
PY
worst=$(echo "$gone" | head -n -1 | awk '{ if ($2 > m) m = $2 } END { print m }')
echo "PASS: survivors gone within $worst s, mpirun (exit $rc) within $(echo "$gone" | tail -1 | cut -d' ' -f2) s;" \
  "lines of the ranks naming node2 (ranks 2, 3): $named; resumed from step $latest on node1 with the same losses to step $end"
