"""One job per run directory (src/train/run_lock.hpp): while a job trains in RUN_DIR, a second job on
the same directory waits, then exits 2 on every rank naming the holder's host and process id, and
leaves the first job's checkpoints alone; once the first job is gone (even SIGKILLed, which leaves
no chance to clean up) the next job takes the directory at once and resumes."""
from common import *

BASE = ["--data.synthetic", "true", "--data.synthetic_samples", "1024", "--data.synthetic_height", "28",
        "--data.synthetic_width", "28", "--data.synthetic_channels", "1", "--model.name", "fmnist_cnn",
        "--train.global_batch", "32", "--train.epochs", "0", "--train.max_steps", "5000", "--train.device", "cpu",
        "--train.eval", "false", "--train.log_every_steps", "1000", "--checkpoint.every_steps", "5"]

d = fresh_dir("owned")
first = start(BASE + ["--run.dir", d], np_ranks=2)
check(wait_for_step(d, 3, first), "first job reached step 3")
owner = open(os.path.join(d, ".owner")).read()
check(f"pid={first.pid}" not in owner and "pid=" in owner and "host=" in owner,
      f"RUN_DIR/.owner records the holder (host, rank 0's pid): {owner!r}")

t0 = time.time()
rc, out = run(BASE + ["--run.dir", d], np_ranks=2, timeout=90)
waited = time.time() - t0
holder_pid = [l.split("=", 1)[1] for l in owner.splitlines() if l.startswith("pid=")][0]
check(rc == 2, f"a second job on the same run directory exits 2 (got {rc})") or print(out)
check("is in use by another job" in out and f"process {holder_pid}" in out,
      "its message names the run directory's holder and its process id") or print(out)
check(waited >= 10, f"it waited for the holder before giving up ({waited:.1f} s)")
check(f"is locked by another job (" in out and f"process {holder_pid}" in out and "waiting up to 15 s" in out,
      "it says at once that it waits, and for whom") or print(out)
check(first.poll() is None, "the first job still runs")

os.killpg(first.pid, signal.SIGKILL)  # mpirun and the ranks at once: nothing runs its clean-up
first.wait()
time.sleep(1.5)  # let the killed ranks disappear
t0 = time.time()
# Resume, then stop soon through a self-signal (exit 75) rather than train all 5000 steps again.
resume_at = max(int(f.split("-")[1].split(".")[0]) for f in os.listdir(os.path.join(d, "checkpoints"))
                if f.startswith("step-") and f.endswith(".h5"))
rc, out = run(BASE + ["--run.dir", d], np_ranks=2, timeout=150, env=faults(signal_at_step=resume_at + 2))
check(rc == 75, f"after the holder is killed the next job runs (exit {rc}, 75 from its self-signal)") or print(out)
check("resum" in out.lower(), "and resumes from the killed job's checkpoint") or print(out)
finish()
