"""Elastic resume (mlp): a checkpoint saved at world_size 2 resumes at 1 and at 4 ranks, continuing the
same global sample stream: losses within 1e-5 relative of the uninterrupted 2-rank run, and the
learning rate at every step identical."""
from common import *

BASE = ["--data.synthetic", "true", "--data.synthetic_samples", "512", "--data.synthetic_height", "12",
        "--data.synthetic_width", "12", "--data.synthetic_channels", "1", "--model.name", "mlp",
        "--model.mlp_hidden", "64", "--train.global_batch", "32", "--train.epochs", "0", "--train.max_steps", "40",
        "--train.device", "cpu", "--train.eval", "false", "--train.log_every_steps", "1000",
        "--data.flip", "true", "--data.crop_padding", "1", "--optim.warmup_steps", "5"]

ref = fresh_dir("w2_straight")
rc, out = run(BASE + ["--run.dir", ref], np_ranks=2)
check(rc == 0, f"straight 2-rank run exits 0 (got {rc})") or print(out)
saved = fresh_dir("w2_stopped")
rc, out = run(BASE + ["--run.dir", saved], np_ranks=2, env=faults(signal_at_step=13))
check(rc == 75, f"2-rank run stopped after step 13 (exit {rc})")

for w in (1, 4):
    d = fresh_dir(f"resume_w{w}")
    shutil.copytree(saved, d)
    rc, out = run(BASE + ["--run.dir", d], np_ranks=w)
    check(rc == 0, f"resume at world_size {w} exits 0 (got {rc})") or print(out)
    check("saved with world_size 2, now %d" % w in out, f"world_size {w}: says it resumed a world_size-2 checkpoint")
    l, r = losses(d), losses(ref)
    check(sorted(l) == list(range(1, 41)), f"world_size {w}: steps 1..40 logged")
    worst = max(abs(l[s] - r[s]) / abs(r[s]) for s in range(14, 41))
    check(worst <= 1e-5, f"world_size {w}: losses after the resume within 1e-5 relative (worst {worst:.2e})")
    check(all(lrs(d)[s] == lrs(ref)[s] for s in range(1, 41)), f"world_size {w}: learning rate identical at every step")
    ints = state(ckpt(d, 40))[1]
    check(ints["world_size"] == w and ints["step"] == 40, f"world_size {w}: final checkpoint records world_size {w}")
finish()
