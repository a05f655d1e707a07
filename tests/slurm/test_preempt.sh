#!/usr/bin/env bash
# Preemption in a real single-node Slurm: slurm/train.sbatch with the quickstart config on 2 tasks
# gets USR1 mid-run (sent to the batch shell, as --signal=B:USR1@... does before the time limit);
# the trainer checkpoints and exits 75, the job requeues itself, the rerun of the same job id
# resumes from the checkpoint and finishes. Its final parameters and momentum (the step-40
# checkpoint) must equal, bit for bit, those of an uninterrupted run of the same job submitted
# alongside, and so must the loss of every step after the resume; BatchNorm running statistics
# agree to float rounding (see below). Exit 77 when Slurm cannot start.
# HT_PREEMPT_SBATCH_ARGS replaces the job shape (default --ntasks-per-node=2 --gpus-per-node=2); the
# multi-node test (tests/cluster/test_preempt.sh) runs this script on 2 nodes of the simulated cluster.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
source "$here/cluster.sh"
ht_slurm_train_test_begin || exit $?

steps=40
submit() {  # submit NAME RUN_DIR -> job id
  local id
  # shellcheck disable=SC2086
  id=$(cd "$work" && sbatch --parsable --job-name="$1" ${HT_PREEMPT_SBATCH_ARGS:---ntasks-per-node=2 --gpus-per-node=2} \
         "$src/slurm/train.sbatch" --config "$src/configs/fmnist_cnn.ini" --data.dir "$work/fmnist" \
         --data.limit_train 2048 --data.limit_test 500 --train.global_batch 32 --train.max_steps $steps \
         --train.eval false --train.device cpu --checkpoint.every_steps 20 --run.dir "$2") || return 1
  echo "${id%%;*}"
}
ref=$(submit ref "$work/ref") || fail "sbatch ref"
pre=$(submit pre "$work/pre") || fail "sbatch pre"
echo "reference job $ref, preempted job $pre"

# Signal once the preempted run is well into training but far from the end.
n=0
for _ in $(seq 1 600); do
  n=$(grep -c '"event":"step"' "$work/pre/metrics.jsonl" 2>/dev/null); n=${n:-0}
  (( n >= 5 )) && break
  sleep 0.1
done
(( n >= 5 && n < 30 )) || fail "preempted run at $n steps when it should have been at 5..29"
scancel --batch --signal=USR1 "$pre" || fail "scancel --batch --signal=USR1 $pre"
echo "sent USR1 to job $pre at step $n"
st=$(ht_slurm_wait_state "$pre" '^PENDING$' 60) || fail "job $pre not requeued (state $st)"
ht_slurm_release_requeued "$pre"
for j in "$ref" "$pre"; do
  st=$(ht_slurm_wait_state "$j" '^(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY)$' 120) ||
    fail "job $j did not finish (state $st)"
  [[ $st == COMPLETED ]] || fail "job $j ended $st"
done
info=$(scontrol show job "$pre" 2>/dev/null)
[[ -z $info ]] || grep -q 'Restarts=1' <<<"$info" || fail "expected Restarts=1 for $pre"
log=$work/pre-$pre.out
echo "---- $log"; cat "$log"
grep -q 'received SIGUSR1' "$log" || fail "batch shell did not see USR1"
grep -q 'requeueing job' "$log" || fail "no self-requeue"
grep -q 'restart 1:' "$log" || fail "log did not append the rerun"

/usr/bin/python3 - "$work/ref" "$work/pre" "$steps" <<'PY' || fail "resumed run differs from the uninterrupted one"
import json, os, sys
import h5py, numpy as np
ref, pre, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
def events(d):
    return [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl"))]
e = events(pre)
starts = [x for x in e if x["event"] == "run_start"]
ends = [x for x in e if x["event"] == "run_end"]
assert len(starts) == 2, "expected 2 run_start lines, got %d" % len(starts)
assert [x["exit_code"] for x in ends] == [75, 0], ends
ck = [x["step"] for x in e if x["event"] == "checkpoint"]
resumed = starts[1]["resumed_from_step"]
assert 0 < resumed < steps and resumed in ck, (resumed, ck)
# Steps after the resume continue where the checkpoint left off, up to the end.
after = [x["step"] for x in e[e.index(starts[1]):] if x["event"] == "step"]
assert after == list(range(resumed + 1, steps + 1)), after
# Same losses at the same steps as the uninterrupted run.
rl = {x["step"]: x["loss"] for x in events(ref) if x["event"] == "step"}
pl = {x["step"]: x["loss"] for x in e[e.index(starts[1]):] if x["event"] == "step"}
bad = [s for s in pl if pl[s] != rl[s]]
assert not bad, "losses differ at steps %s: %s vs %s" % (bad[:5], [pl[s] for s in bad[:3]], [rl[s] for s in bad[:3]])
# Final state, bit for bit.
name = "checkpoints/step-%08d.h5" % steps
fa, fb = h5py.File(os.path.join(ref, name), "r"), h5py.File(os.path.join(pre, name), "r")
def tensors(f):
    out = {}
    for g in ("param", "buffer", "momentum"):
        if g in f:
            f[g].visititems(lambda n, o: out.__setitem__(g + "/" + n, o[()]) if isinstance(o, h5py.Dataset) else None)
    return out
ta, tb = tensors(fa), tensors(fb)
assert ta and set(ta) == set(tb), (sorted(ta)[:5], sorted(tb)[:5])
assert any(k.startswith("param/") for k in ta) and any(k.startswith("momentum/") for k in ta)
# Parameters and momentum: bit for bit.
diff = [k for k in ta if not k.startswith("buffer/") and not np.array_equal(ta[k], tb[k])]
assert not diff, "tensors differ: %s (max |diff| %g)" % (diff[:5], max(float(np.max(np.abs(ta[k] - tb[k]))) for k in diff))
# BatchNorm running statistics are per rank between checkpoints and saved as their average over
# ranks (docs/checkpoint.md), so the resumed run restarts from the average at the stop step while the
# uninterrupted one averages only at step 40: the same value up to float rounding (a few ulp).
# They do not enter the training loss (batch statistics do), hence the exact losses above.
bufs = [k for k in ta if k.startswith("buffer/")]
worst = 0.0
for k in bufs:
    d = np.abs(ta[k].astype(np.float64) - tb[k]) / np.maximum(np.abs(ta[k].astype(np.float64)), 1e-3)
    worst = max(worst, float(d.max()))
assert worst < 1e-5, "BatchNorm buffers differ by %g (relative), more than rounding" % worst
print("resumed at step %d (checkpoints %s); %d parameter/momentum tensors identical to the uninterrupted "
      "run at step %d, %d BatchNorm buffers within %.2g (relative); losses identical over %d steps" % (
          resumed, ck, len(ta) - len(bufs), steps, len(bufs), worst, len(pl)))
PY
echo PASS
