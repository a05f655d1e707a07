"""Exact resume (2 ranks, fmnist_cnn with batch norm, random crop + flip): 20 steps straight against
runs stopped by SIGTERM and rerun with the same command. Losses at every step and final parameters
and momentum must be bitwise equal. Stops: on rank 0 at an epoch boundary (step 16 of 16), on rank 1
only inside an epoch (step 7), and on rank 1 inside the second epoch (step 18); 16 steps per epoch."""
from common import *

BASE = ["--data.synthetic", "true", "--data.synthetic_samples", "512", "--data.synthetic_height", "28",
        "--data.synthetic_width", "28", "--data.synthetic_channels", "1", "--model.name", "fmnist_cnn",
        "--train.global_batch", "32", "--train.epochs", "0", "--train.max_steps", "20", "--train.device", "cpu",
        "--data.crop_padding", "2", "--data.flip", "true", "--checkpoint.every_steps", "4",
        "--train.log_every_steps", "100", "--train.eval", "false"]

ref = fresh_dir("straight")
rc, out = run(BASE + ["--run.dir", ref], np_ranks=2)
check(rc == 0, f"straight run exits 0 (got {rc})") or print(out)
ref_losses = losses(ref)
check(sorted(ref_losses) == list(range(1, 21)), "straight run logged steps 1..20")

for name, step, rank in [("epoch_end_rank0", 16, 0), ("inside_epoch_rank1", 7, 1), ("second_epoch_rank1", 18, 1)]:
    d = fresh_dir(name)
    args = BASE + ["--run.dir", d]
    rc, out = run(args, np_ranks=2, env=faults(signal_at_step=step, signal_rank=rank))
    check(rc == 75, f"{name}: SIGTERM on rank {rank} after step {step}: exit 75 (got {rc})") or print(out)
    check(f"stopped by SIGTERM after step {step}" in out or f"stopped by a signal on another rank after step {step}" in out,
          f"{name}: every rank stopped after step {step}")
    check(os.path.exists(ckpt(d, step)) and latest(d) == ckpt(d, step), f"{name}: LATEST names step {step}")
    _, ints = state(ckpt(d, step))
    check(ints["step"] == step and ints["step_in_epoch"] == (step - 1) % 16 + 1 and ints["world_size"] == 2,
          f"{name}: checkpoint step {ints['step']}, step_in_epoch {ints['step_in_epoch']}, world_size 2")
    rc, out = run(args, np_ranks=2)  # the same command
    check(rc == 0, f"{name}: rerun exits 0 (got {rc})") or print(out)
    check(f"resumed from {ckpt(d, step)}: step {step}" in out, f"{name}: rerun says what it resumed")
    l = losses(d)
    check(sorted(l) == list(range(1, 21)) and all(l[s] == ref_losses[s] for s in l),
          f"{name}: losses bitwise equal at every step")
    ok, why = same_state(ckpt(ref, 20), ckpt(d, 20))
    check(ok, f"{name}: final parameters and momentum bitwise equal ({why})")
    check(len(metrics(d, "run_start")) == 2 and metrics(d, "run_end")[0]["exit_code"] == 75,
          f"{name}: metrics.jsonl appended (two run_start, first run_end exit_code 75)")
finish()
