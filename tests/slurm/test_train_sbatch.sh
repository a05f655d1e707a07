#!/usr/bin/env bash
# `sbatch --wait slurm/train.sbatch` with the quickstart config (configs/fmnist_cnn.ini) on 2 tasks
# (srun --mpi=pmix) in a real single-node Slurm: exits 0, and the run directory holds the effective
# config and metrics (run_start with world_size 2, every step, run_end finished). Small: 2,048 train
# samples, 12 steps. Exit 77 when Slurm cannot start.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/cluster.sh"
ht_slurm_train_test_begin || exit $?

run=$work/run
id=$(cd "$work" && sbatch --parsable --wait --job-name=quick --ntasks-per-node=2 --gpus-per-node=2 \
       "$src/slurm/train.sbatch" --config "$src/configs/fmnist_cnn.ini" --data.dir "$work/fmnist" \
       --data.limit_train 2048 --data.limit_test 500 --train.global_batch 32 --train.max_steps 12 \
       --train.device cpu --run.dir "$run")
rc=$?
id=${id%%;*}
log=$work/quick-$id.out
echo "---- $log"; cat "$log"
[[ $rc == 0 ]] || fail "sbatch --wait train.sbatch exited $rc"
[[ -s $run/config.ini ]] || fail "no effective config in $run"
/usr/bin/python3 - "$run/metrics.jsonl" <<'PY' || fail "metrics"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
kinds = [e["event"] for e in ev]
assert kinds[0] == "run_start" and ev[0]["world_size"] == 2, ev[0]
steps = [e["step"] for e in ev if e["event"] == "step"]
assert steps == list(range(1, 13)), steps
end = [e for e in ev if e["event"] == "run_end"]
assert len(end) == 1 and end[0]["status"] == "finished" and end[0]["exit_code"] == 0, end
last = [e for e in ev if e["event"] == "step"][-1]
assert last["loss"] is not None and last["images_per_s"] > 0, last
print("metrics ok: %d steps, final loss %.4f" % (len(steps), last["loss"]))
PY
grep -q 'restart 0: 2 tasks' "$log" || fail "log lacks the launch line"
grep -q 'to resume this run from a new submission' "$log" && fail "a finished job printed a resubmit command"

# A job without --run.dir that fails (a bad value, exit 2): the log warns that the directory was
# defaulted from the job id and prints the exact command that resumes this run from a new submission.
# --gpus-per-node=0 (the CPU-cluster form of docs/slurm.md) overrides the script's --gpus-per-node=8.
id=$(cd "$work" && sbatch --parsable --wait --job-name=bad --ntasks-per-node=1 --gpus-per-node=0 \
       "$src/slurm/train.sbatch" --config "$src/configs/fmnist_cnn.ini" --data.dir "$work/fmnist" \
       --train.log_every_steps 0 --train.device cpu)
rc=$?
id=${id%%;*}
log=$work/bad-$id.out
echo "---- $log"; cat "$log"
[[ $rc == 2 ]] || fail "the failing job exited $rc, want 2"
grep -q "warning: no --run.dir given: this run's directory is $work/runs/bad-$id" "$log" || fail "no warning for the defaulted run.dir"
grep -q "train.log_every_steps = 0: must be in" "$log" || fail "the bad value is not named"
want="to resume this run from a new submission (same environment: HT_CONFIG, HT_CONTAINER, ...): cd $work && sbatch --job-name=bad $src/slurm/train.sbatch --config $src/configs/fmnist_cnn.ini --data.dir $work/fmnist --train.log_every_steps 0 --train.device cpu --run.dir $work/runs/bad-$id"
grep -qF "$want" "$log" || fail "no resubmit command, or not this one: $want"
echo PASS
