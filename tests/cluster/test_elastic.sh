#!/usr/bin/env bash
# Issue 14 item 6: elastic across node counts. A checkpoint saved on 2 nodes x 2 ranks (stopped after
# step 13 by the signal_at_step test fault, exit 75) resumes on 1 node x 2 ranks and on 2 nodes x 1
# rank, continuing the same global sample stream: losses after the resume within 1e-5 relative of
# the uninterrupted 2x2 run, the learning rate identical at every step, the final checkpoint recording
# the new world size (the single-host tests/ckpt/test_elastic.py, across nodes).
HT_TEST_LIMIT_S=${HT_TEST_LIMIT_S:-280}
source "$(dirname "$0")/lib.sh"
base=(--config "$work/small.ini" --data.synthetic true --data.synthetic_samples 512 --data.synthetic_height 12
      --data.synthetic_width 12 --data.synthetic_channels 1 --model.name mlp --model.mlp_hidden 64
      --train.global_batch 32 --train.epochs 0 --train.max_steps 40 --train.device cpu --train.threads 1
      --train.eval false --train.log_every_steps 1000 --data.flip true --data.crop_padding 1
      --optim.warmup_steps 5)
ht_small_flags >/dev/null  # writes small.ini
ht_mpirun node1:2,node2:2 ref.log "$HT_BIN" train "${base[@]}" --run.dir "$work/ref" || fail "uninterrupted 2x2 run"
ht_mpirun node1:2,node2:2 saved.log -x HT_TEST_FAULTS=signal_at_step=13 "$HT_BIN" train "${base[@]}" --run.dir "$work/saved"
rc=$?
[[ $rc == 75 ]] || fail "2x2 run stopped after step 13 exited $rc, expected 75"
for layout in node1:2 node1:1,node2:1; do
  d=$work/resume-${layout//[:,]/_}
  cp -a "$work/saved" "$d"
  ht_mpirun "$layout" "$d.log" "$HT_BIN" train "${base[@]}" --run.dir "$d" || fail "resume on $layout"
  grep -q 'saved with world_size 4, now 2' "$d.log" || fail "resume on $layout: no 'saved with world_size 4, now 2'"
  /usr/bin/python3 - "$work/ref" "$d" "$layout" <<'PY' || fail "resume on $layout differs from the uninterrupted run"
import json, sys
import h5py
ref, d, layout = sys.argv[1:4]
def steps(run):
    return {r["step"]: r for r in map(json.loads, open(run + "/metrics.jsonl")) if r["event"] == "step"}
a, b = steps(ref), steps(d)
assert sorted(b) == list(range(1, 41)), sorted(b)
worst = max(abs(a[s]["loss"] - b[s]["loss"]) / abs(a[s]["loss"]) for s in range(14, 41))
assert worst <= 1e-5, f"worst relative loss difference after the resume {worst:.2e}"
assert all(a[s]["lr"] == b[s]["lr"] for s in range(1, 41)), "learning rates differ"
starts = [r for r in map(json.loads, open(d + "/metrics.jsonl")) if r["event"] == "run_start"]
want = ["node1", "node1"] if layout == "node1:2" else ["node1", "node2"]
assert starts[-1]["hosts"] == want, starts[-1]["hosts"]
with h5py.File(d + "/checkpoints/step-00000040.h5", "r") as f:
    ws, st = int(f["ints"]["world_size"][0]), int(f["ints"]["step"][0])
assert (ws, st) == (2, 40), (ws, st)
print(f"{layout}: steps 14..40 within {worst:.1e} of the 2x2 run, lr identical, world_size 2 at step 40")
PY
done
echo "PASS: saved on 2x2, resumed on 1x2 and 2x1 with the same sample stream"
