"""Real signals through each launcher path (2 ranks under mpirun, fmnist_cnn): every path must stop
all ranks after the same step with a valid checkpoint, and the rerun must end bitwise equal to an
uninterrupted run.
  a) SIGUSR1 to mpirun (Open MPI forwards it): mpirun exits 75. A second SIGUSR1 arrives while the
     (slowed) stop checkpoint is being written and must not corrupt it.
  b) SIGTERM to one rank directly (as srun/scancel and Slurm preemption deliver it to the tasks): exit 75.
  c) SIGTERM to mpirun: Open MPI sends SIGCONT, then SIGTERM to the ranks after
     odls_base_sigkill_timeout (default 1 s) and SIGKILL one timeout later; the checkpoint is saved
     within that grace (raised to 5 s here), but mpirun itself exits 1 (measured with Open MPI
     4.1.4), so batch scripts should forward USR1 instead (README "Checkpoints and preemption").
  d) SIGUSR1 to mpirun while the ranks are still starting (rank 0 waits for the run directory's lock,
     held here by the test): a job whose time limit is at or below train.sbatch's USR1 lead time gets
     it at once. The ranks must not die of it (exit 138): they stop after their first step with a
     checkpoint, exit 75, and the rerun ends bitwise equal.
  e) SIGUSR1 while the libraries initialise, before main (a preloaded library's constructor sends it,
     deterministically): the handler installed from the executable's .preinit_array takes it as a
     stop request (exit 75 after step 1) instead of the rank dying of it (exit 138)."""
import fcntl
from common import *

BASE = ["--data.synthetic", "true", "--data.synthetic_samples", "1024", "--data.synthetic_height", "28",
        "--data.synthetic_width", "28", "--data.synthetic_channels", "1", "--model.name", "fmnist_cnn",
        "--train.global_batch", "32", "--train.epochs", "0", "--train.max_steps", "30", "--train.device", "cpu",
        "--train.eval", "false", "--train.log_every_steps", "1000", "--checkpoint.every_steps", "10"]

ref = fresh_dir("straight")
rc, out = run(BASE + ["--run.dir", ref], np_ranks=2)
check(rc == 0, f"straight run exits 0 (got {rc})") or print(out)
# mpirun's own per-process OMPI_MCA_* variables (vpid, node rank) are not a launch problem.
check("warning: launch" not in out, "a plain mpirun run gives no launch warning") or print(out)


def rank_pids(mpirun_pid):
    out = subprocess.run(["pgrep", "-P", str(mpirun_pid)], capture_output=True, text=True).stdout.split()
    return [int(p) for p in out]


def finish_job(p, name):
    """The job's output once it ends (None, killed and failed, when it has not ended in 60 s)."""
    try:
        return p.communicate(timeout=60)[0]
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        check(False, f"{name}: job ended after the signal")
        return None


def path(name, extra, send, want_rc, env=None, lenient_finish=False):
    d = fresh_dir(name)
    args = BASE + ["--run.dir", d] + extra
    p = start(args, np_ranks=2, env=env)
    if not check(wait_for_step(d, 3, p), f"{name}: training reached step 3"):
        p.kill()
        return
    t0 = time.time()
    send(p)
    out = finish_job(p, name)
    if out is None:
        return
    dt = time.time() - t0
    check(p.returncode == want_rc, f"{name}: mpirun exit code {p.returncode} (want {want_rc}), {dt:.2f} s after the signal")
    stops = [l for l in out.splitlines() if "stopped by" in l]
    ends = metrics(d, "run_end")
    if not stops and lenient_finish and ends and ends[-1].get("status") == "finished":
        # SIGTERM to mpirun reaches the ranks only after odls_base_sigkill_timeout: on a fast machine
        # the 30 steps can end first. Then there is nothing to stop; the checks below still apply.
        check(True, f"{name}: the run finished inside mpirun's grace period (no stop to report)")
    else:
        check(len(stops) == 1, f"{name}: rank 0 reports the stop: {stops[:1]}") or print(out)
    step = metrics(d, "run_end")[-1]["steps"] if metrics(d, "run_end") else -1
    check(step > 0 and latest(d) == ckpt(d, step), f"{name}: LATEST names the stop checkpoint (step {step})")
    ints = state(ckpt(d, step))[1]
    check(ints["step"] == step, f"{name}: the stop checkpoint reads back (h5py, fletcher32)")
    rc, out = run(args, np_ranks=2, env=env)
    check(rc == 0 and f"resumed from {ckpt(d, step)}" in out, f"{name}: the same command resumes from step {step}") or print(out)
    l = losses(d)
    check(sorted(l) == list(range(1, 31)) and all(l[s] == losses(ref)[s] for s in l), f"{name}: losses bitwise equal")
    ok, why = same_state(ckpt(ref, 30), ckpt(d, 30))
    check(ok, f"{name}: final parameters and momentum bitwise equal ({why})")


def usr1_twice(p):
    p.send_signal(signal.SIGUSR1)
    time.sleep(0.5)  # inside the 1.5 s slowed stop checkpoint
    p.send_signal(signal.SIGUSR1)


path("usr1_to_mpirun", [], usr1_twice, 75, env=faults(ckpt_write_delay_ms=1500))
path("term_to_rank1", [], lambda p: os.kill(sorted(rank_pids(p.pid))[-1], signal.SIGTERM), 75)
# Grace raised from the default 1 s to 5 s (the README's advice) so a loaded test machine still fits: with
# 2 s, one run under a load of ~6 was SIGKILLed before its stop checkpoint (no run_end, no checkpoint).
path("term_to_mpirun", [], lambda p: p.send_signal(signal.SIGTERM), 1, env={"OMPI_MCA_odls_base_sigkill_timeout": "5"},
     lenient_finish=True)


def usr1_while_starting():
    name = "usr1_while_starting"
    d = fresh_dir(name)
    os.makedirs(d, exist_ok=True)
    lock = os.open(os.path.join(d, ".owner"), os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(lock, fcntl.LOCK_EX)  # rank 0 waits for it (up to 15 s) before loading anything
    args = BASE + ["--run.dir", d]
    p = start(args, np_ranks=2)
    owner = os.path.realpath(os.path.join(d, ".owner"))

    def waiting_on_lock(pid):
        try:
            return any(os.path.realpath(f"/proc/{pid}/fd/{fd}") == owner for fd in os.listdir(f"/proc/{pid}/fd"))
        except OSError:
            return False
    t0 = time.time()
    while time.time() - t0 < 30 and not any(waiting_on_lock(r) for r in rank_pids(p.pid)):
        time.sleep(0.02)
    if not check(any(waiting_on_lock(r) for r in rank_pids(p.pid)), f"{name}: rank 0 waits for the run directory lock"):
        os.killpg(p.pid, signal.SIGKILL)
        return
    p.send_signal(signal.SIGUSR1)
    time.sleep(1.0)
    os.close(lock)  # releases the flock: start-up goes on
    out = finish_job(p, name)
    if out is None:
        return
    check(p.returncode == 75, f"{name}: mpirun exit code {p.returncode} (want 75: stopped with a checkpoint)") or print(out)
    check(any("stopped by SIGUSR1 after step 1" in l for l in out.splitlines()), f"{name}: stopped after step 1") or print(out)
    check(latest(d) == ckpt(d, 1), f"{name}: LATEST names the step-1 checkpoint")
    rc, out = run(args, np_ranks=2)
    check(rc == 0 and f"resumed from {ckpt(d, 1)}" in out, f"{name}: the same command resumes from step 1") or print(out)
    ok, why = same_state(ckpt(ref, 30), ckpt(d, 30))
    check(ok, f"{name}: final parameters and momentum bitwise equal ({why})")


usr1_while_starting()


def usr1_before_main():
    name = "usr1_before_main"
    d = fresh_dir(name)
    os.makedirs(d)
    src, lib = os.path.join(d, "early_usr1.c"), os.path.join(d, "early_usr1.so")
    with open(src, "w") as f:  # unsetenv: the MPI daemon that a singleton rank starts must not get it too
        f.write("#include <signal.h>\n#include <stdlib.h>\n#include <unistd.h>\n"
                "__attribute__((constructor)) static void early_usr1(void) "
                "{ unsetenv(\"LD_PRELOAD\"); kill(getpid(), SIGUSR1); }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", lib, src], check=True)
    rc, out = run(BASE + ["--run.dir", os.path.join(d, "run")], env={"LD_PRELOAD": lib})
    check(rc == 75, f"{name}: exit code {rc} (want 75: stopped with a checkpoint, not 138)") or print(out)
    check("stopped by SIGUSR1 after step 1" in out, f"{name}: stopped after step 1") or print(out)
    check(latest(os.path.join(d, "run")) == ckpt(os.path.join(d, "run"), 1), f"{name}: LATEST names the step-1 checkpoint")


usr1_before_main()
finish()