#!/usr/bin/env bash
# Issue 14 item 3: a node dies. 4 ranks on node1 and node2 train (dist.timeout_s = 10, a checkpoint
# every 20 steps); mid-step node2 dies, twice:
#  1. only its ranks are SIGKILLed (its Open MPI daemon lives on and reports them dead);
#  2. every process on node2 is SIGKILLed (its ranks and its daemon).
# Each time the survivors (ranks 0, 1 on node1) must exit within dist.timeout_s plus the stated grace
# (10 s), each naming node2 (ranks 2, 3) as lost in its own stderr (here Open MPI ends the job itself,
# SIGTERM then SIGKILL a second later: the guard's quick probe on the signal names them,
# docs/exit_codes.md#lost-peers); mpirun returns non-zero in that time; no hpctrain/orted/mpirun
# process is left on either node. After 2. the newest checkpoint is intact and a rerun on node1 alone
# (2 ranks, same global batch) resumes from it with the same sample stream: every step loss within
# 1e-5 relative of an uninterrupted 2-rank run on node1.
HT_TEST_CLUSTER_OPTS="--nodes 2" HT_TEST_LIMIT_S=${HT_TEST_LIMIT_S:-240}
source "$(dirname "$0")/failures_lib.sh"

limit=$((TIMEOUT_S + GRACE_S + SLACK_S))

# node_dies RUN_DIR LOG HOW STEPS: a 4-rank run on node1 and node2 reaches STEPS, then node2 dies (HOW:
# ranks = SIGKILL its hpctrain processes, node = SIGKILL every process on it). Checks the survivors and
# mpirun end in time, mpirun non-zero, both survivors name node2 (ranks 2, 3), nothing left. Sets
# GONE ("pid seconds" lines, mpirun last), RC (mpirun's status), KILLED_AT (the step).
node_dies() {
  local d=$1 log=$2 how=$3 steps=$4 p1 p2 ok r
  long_run "$d" node1:2,node2:2 "$log"
  wait_steps "$d" "$steps" 90
  rank_pids_2x2
  KILLED_AT=$(steps_logged "$d")
  T0=$EPOCHREALTIME
  if [[ $how == ranks ]]; then kill -KILL "${p2[@]}"; else ht_cluster_kill_node node2 KILL; fi
  GONE=$(wait_gone "$limit" "${p1[@]}" "$MPIRUN_PID")
  ok=$?
  echo "node2 ($how) killed at step $KILLED_AT; exits (pid seconds, the last is mpirun): $(echo "$GONE" | tr '\n' ' ')"
  if (( ok != 0 )); then
    stop_mpirun
    fail "node2 ($how): survivors or mpirun still running $limit s after node2 died"
  fi
  wait "$MPIRUN_PID"
  RC=$?
  (( RC != 0 )) || fail "node2 ($how): mpirun returned 0 after node2 died"
  for r in 0 1; do
    rank_log "$d" $r | grep -q -E "^hpctrain: (rank $r: stop signal|fatal \(rank $r on node1\)).*node2 \(ranks 2, 3\)" ||
      fail "node2 ($how): rank $r did not name node2 (ranks 2, 3) as lost before it ended: $(rank_log "$d" $r | grep -v -e '^\[epoch' -e ' = ' -e 'warning: launch' | tail -3)"
  done
  sleep 1
  local left
  left="$(leftover node1)$(leftover node2)"
  [[ -z $left ]] || fail "node2 ($how): processes left: $left"
}

node_dies "$work/ranks" ranks.log ranks 20
ranks_worst=$(echo "$GONE" | head -n -1 | awk '{ if ($2 > m) m = $2 } END { print m }')
ranks_mpirun="$(echo "$GONE" | tail -1 | cut -d' ' -f2) s (exit $RC)"
d=$work/dies
node_dies "$d" dies.log node 50
gone=$GONE rc=$RC

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
same_losses "$d" "$work/ref" "$end" || fail "the resumed run's losses differ from the uninterrupted run"
worst=$(echo "$gone" | head -n -1 | awk '{ if ($2 > m) m = $2 } END { print m }')
echo "PASS: only node2's ranks killed: survivors gone within $ranks_worst s, each naming node2 (ranks 2, 3), mpirun within" \
  "$ranks_mpirun; all of node2 killed: survivors gone within $worst s, each naming node2 (ranks 2, 3), mpirun (exit $rc)" \
  "within $(echo "$gone" | tail -1 | cut -d' ' -f2) s; resumed from step $latest on node1 with the same losses to step $end"
