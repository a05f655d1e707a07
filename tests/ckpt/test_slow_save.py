"""A checkpoint save on rank 0 that takes longer than dist.timeout_s is not a failed peer: with every
write slowed to 4 s (HT_TEST_FAULTS ckpt_write_delay_ms), checkpoints every 2 steps (so a save stalls
behind the previous write) and a 1 s collective time limit, 2 ranks train to the end and exit 0. Before,
rank 1's next gradient allreduce timed out and blamed "another rank"."""
from common import *

BASE = ["--data.synthetic", "true", "--data.synthetic_samples", "512", "--data.synthetic_height", "8",
        "--data.synthetic_width", "8", "--data.synthetic_channels", "1", "--model.name", "mlp",
        "--train.global_batch", "16", "--train.epochs", "0", "--train.max_steps", "12", "--train.device", "cpu",
        "--train.eval", "false", "--checkpoint.every_steps", "2", "--dist.timeout_s", "1"]
d = fresh_dir("slow_save")
rc, out = run(BASE + ["--run.dir", d], np_ranks=2, timeout=180, env=faults(ckpt_write_delay_ms=4000))
check(rc == 0, f"2 ranks with 4 s checkpoint writes and a 1 s time limit finish (exit {rc})") or print(out[-3000:])
check("timed out" not in out, "no collective timed out") or print(out[-3000:])
check(os.path.basename(latest(d)) == "step-00000012.h5", "the final checkpoint is the newest")
finish()
