"""Random SIGKILLs, then resume with the same command: every trial must end bitwise equal to an
uninterrupted run (2 ranks under mpirun, fmnist_cnn with batch norm, random crop + flip, 8 steps per
epoch, 4 epochs, evaluation after each epoch, a checkpoint every 3 steps, all kept).

Each trial starts the same run in a fresh run directory (always the same path, so that even the config
text saved in the checkpoints is the reference's) and SIGKILLs it once or twice:
  rank      one rank (chosen at random)            mpirun reports it: exit 137 (128 + SIGKILL)
  mpirun    mpirun itself: its ranks run on for ~1 s and may write more checkpoints while the rerun
            starts; the rerun's run-directory lock (RUN_DIR/.owner) waits for them     exit -9 (killed)
  all       every rank at once                      exit 137
  write     rank 0, rank 1, every rank or mpirun while a checkpoint file is being written (its
            temporary name is on disk; writes slowed by HT_TEST_FAULTS ckpt_write_delay_ms in some trials)
  double    a first kill of any kind above, then a second one during the resumed run, at a random moment
  double1st the same, the second kill during the resumed run's first checkpoint write
A random moment is after a random step (or during start-up) plus a random fraction of a step. Then the
same command is rerun until it finishes (exit 0). Every trial must end with:
  - every dataset of every checkpoint in the run directory (the final one included) bitwise equal to the
    reference's checkpoint of the same step: all datasets, enumerated with h5py (tensors, per-rank
    buffers rank_buffer/R/..., RNG and sampler state, counters, config text);
  - every step record of metrics.jsonl (also those logged before a kill) with the reference's loss, every
    evaluation with the reference's test loss and top-1, every step 1..32 and every epoch's evaluation
    logged, the final test loss and top-1 equal;
  - each rerun resumed from the newest checkpoint on disk when it started, or a newer one; no checkpoint
    rejected or quarantined (.bad), no temporary file left; LATEST names the final checkpoint;
  - no process of the trial left running; exit codes as listed above (docs/exit_codes.md), 0 at the end.
HT_KILL_SEED (default 2026) seeds the trials, HT_KILL_TRIALS (default 12) sets their number, and
HT_KILL_ONLY=3,7 runs only those trials (each trial draws from its own seeded generator, so a failing
trial reproduces alone); HT_KILL_NP sets the ranks (default 2); HT_KILL_ARGS sets command-line keys of every run (the reference's too)."""
import random

from common import *

SEED = int(os.environ.get("HT_KILL_SEED", "2026"))
TRIALS = int(os.environ.get("HT_KILL_TRIALS", "12"))
ONLY = {int(x) for x in os.environ.get("HT_KILL_ONLY", "").split(",") if x.strip()}
STEPS = 32
BASE = ["--data.synthetic", "true", "--data.synthetic_samples", "256", "--data.synthetic_height", "28",
        "--data.synthetic_width", "28", "--data.synthetic_channels", "1", "--model.name", "fmnist_cnn",
        "--train.global_batch", "32", "--train.epochs", "4", "--train.device", "cpu", "--data.crop_padding", "2",
        "--data.flip", "true", "--checkpoint.every_steps", "3", "--checkpoint.keep_last", "100",
        "--train.log_every_steps", "100", "--train.eval", "true"]
_extra = os.environ.get("HT_KILL_ARGS", "").split()  # e.g. "--checkpoint.keep_last 3 --checkpoint.async false"
for _k, _v in zip(_extra[::2], _extra[1::2]):
    if _k in BASE:
        BASE[BASE.index(_k) + 1] = _v
    else:
        BASE += [_k, _v]
WORK = fresh_dir("run")  # every run, the reference's too, trains in this directory
ARGS = BASE + ["--run.dir", WORK]
ATTEMPT_TIMEOUT = 120    # an attempt running longer has hung
KINDS = ["rank", "mpirun", "all", "write", "double", "double1st"]
NP = int(os.environ.get("HT_KILL_NP", "2"))  # ranks (train.global_batch 32 must divide: 1, 2, 4, 8, ...)
TARGETS = ["rank0", f"rank{NP - 1}", "all", "mpirun"]


def alive(pid):
    """True while `pid` runs (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def hpctrain_pids_of_work():
    """Every live process whose command line names this test's run directory (ranks and mpirun)."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit() and int(d) != os.getpid():
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    if WORK.encode() in f.read() and alive(int(d)):
                        out.append(int(d))
            except OSError:
                pass
    return out


class Attempt:
    """One launch of the command under mpirun, with its ranks' process ids as they appear. Its events in
    metrics.jsonl are those from its own resume / run_start on: ranks of a job whose mpirun was killed may
    still append steps after this launch, but never a resume or run_start event."""

    def __init__(self, env):
        self.base = len(metric_events(WORK))
        self.listed = [s for s, _ in list_ckpts()]  # checkpoints on disk at launch
        self.t0 = time.time()
        self.p = start(ARGS, np_ranks=NP, env=env)
        self.ranks = {}  # rank -> pid
        self.out, self.rc = "", None

    def poll_ranks(self):
        if len(self.ranks) == NP:
            return
        kids = subprocess.run(["pgrep", "-P", str(self.p.pid)], capture_output=True, text=True).stdout.split()
        for pid in map(int, kids):
            if pid in self.ranks.values():
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"hpctrain" not in f.read():
                        continue  # forked, not yet exec'ed
                with open(f"/proc/{pid}/environ", "rb") as f:
                    env = dict(e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)
                self.ranks[int(env[b"OMPI_COMM_WORLD_RANK"])] = pid
            except (OSError, KeyError, ValueError):
                pass

    def events(self):
        """This attempt's events, from its resume or run_start event on ([] before it wrote one)."""
        ev = metric_events(WORK)[self.base:]
        for n, j in enumerate(ev):
            if j.get("event") in ("resume", "run_start"):
                return ev[n:]
        return []

    def resumed_from(self):
        """The step this attempt resumed from (its resume event), 0 for a fresh start, None before it said."""
        for j in self.events():
            if j.get("event") == "resume":
                return j["step"]
            if j.get("event") == "run_start":
                return 0
        return None

    def last_step(self):
        """The last step this attempt logged; its starting step before its first; None before run_start."""
        last = None
        for j in self.events():
            if j.get("event") == "run_start":
                last = j["resumed_from_step"]
            elif j.get("event") == "step" and last is not None:
                last = j["step"]
        return last

    def wait(self, pred, timeout=60):
        """Polls (5 ms) until pred() holds; False when the job ended first or the time ran out."""
        t = time.time()
        while time.time() - t < timeout:
            self.poll_ranks()
            if pred():
                return True
            if self.p.poll() is not None:
                return False
            time.sleep(0.005)
        return False

    def pids(self):
        return [self.p.pid] + list(self.ranks.values())

    def finish(self):
        """Waits for mpirun (a hang is killed and reported); its exit code, 124 for a hang."""
        try:
            self.out, _ = self.p.communicate(timeout=max(1, ATTEMPT_TIMEOUT - (time.time() - self.t0)))
            self.rc = self.p.returncode
        except subprocess.TimeoutExpired:
            for pid in self.pids():
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            self.out, _ = self.p.communicate()
            self.rc = 124
        return self.rc


def list_ckpts():
    d = os.path.join(WORK, "checkpoints")
    if not os.path.isdir(d):
        return []
    out = []
    for f in os.listdir(d):
        if f.startswith("step-") and f.endswith(".h5"):
            out.append((int(f[5:13]), os.path.join(d, f)))
    return sorted(out)


def temporaries(pid=None):
    """Temporary checkpoint / LATEST files on disk (of rank 0 process `pid` when given)."""
    out = []
    for d in (os.path.join(WORK, "checkpoints"), WORK):
        if os.path.isdir(d):
            out += [f for f in os.listdir(d) if ".tmp." in f and (pid is None or f.endswith(f".tmp.{pid}"))]
    return out


def kill(a, target):
    """SIGKILLs `target` of attempt `a`: rankR, all (every rank at once) or mpirun."""
    if target == "mpirun":
        pids = [a.p.pid]
    elif target == "all":
        pids = [a.ranks[r] for r in sorted(a.ranks)]
    else:
        pids = [a.ranks[int(target[4:])]]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def kill_at_random_moment(a, rng, target, step_s):
    """During start-up (1 in 8: once both ranks exist, plus up to 0.6 s), else after a random step of
    what this attempt has left to train, plus up to one step's time."""
    if not a.wait(lambda: len(a.ranks) == NP):
        return "missed (ended before its ranks started)"
    if rng.random() < 0.125:
        time.sleep(rng.uniform(0, 0.6))
    else:
        if not a.wait(lambda: a.last_step() is not None):
            return "missed (ended before its first step)"
        first = a.last_step()
        if first >= STEPS - 2:
            return f"missed (resumed at step {first}: nothing left to interrupt)"
        after = rng.randint(first + 1, STEPS - 2)
        if not a.wait(lambda: a.last_step() >= after):
            return f"missed (ended before step {after})"
        time.sleep(rng.uniform(0, step_s))
    if a.p.poll() is not None:
        return "missed (ended first)"
    step = a.last_step()
    kill(a, target)
    return f"{target} t={time.time() - a.t0:.2f}s " + ("in start-up" if step is None else f"after step {step}")


def kill_in_write(a, rng, target, first_only, delay_s):
    """While rank 0 of this attempt has a temporary checkpoint (or LATEST) file on disk: up to 90% of the
    write's injected delay after it appeared (the delay sleeps half-way through the write)."""
    if not a.wait(lambda: len(a.ranks) == NP):
        return "missed (ended before its ranks started)"
    pid0 = a.ranks[0]
    skip = 0 if first_only else rng.randint(0, 6)  # which of the attempt's writes
    seen = 0
    seen_now = []

    def appeared():
        # One listing, kept: a short write (LATEST) can be gone by a second one.
        seen_now[:] = temporaries(pid0)
        return bool(seen_now)

    while True:
        if not a.wait(appeared):
            return f"missed (no write #{seen + 1} seen)"
        name = seen_now[0]
        if seen == skip:
            break
        seen += 1
        a.wait(lambda: name not in temporaries(pid0))
    time.sleep(rng.uniform(0, 0.9 * delay_s))
    still = bool(temporaries(pid0))
    kill(a, target)
    done = "" if still else " (just done)"
    return f"{target} t={time.time() - a.t0:.2f}s in write of {name.split('.tmp')[0]}{done}"


def expected_rc(target):
    return -signal.SIGKILL if target == "mpirun" else 128 + signal.SIGKILL


# ---- the uninterrupted reference ----
print(f"random-kill: seed {SEED} (HT_KILL_SEED), {TRIALS} trials (HT_KILL_TRIALS)", flush=True)
rc, out = run(ARGS, np_ranks=NP, timeout=ATTEMPT_TIMEOUT)
if not check(rc == 0, f"reference run exits 0 (got {rc})"):
    print(out)
    finish()
REF = fresh_dir("reference")
shutil.move(WORK, REF)
REF_LOSS = losses(REF)
REF_EVAL = {j["step"]: (j["loss"], j["top1"]) for j in metrics(REF, "eval")}
REF_END = metrics(REF, "run_end")[-1]
REF_CK = {j["step"] for j in metrics(REF, "checkpoint")}
check(sorted(REF_LOSS) == list(range(1, STEPS + 1)), f"reference logged steps 1..{STEPS}")
check(sorted(REF_EVAL) == [8, 16, 24, 32], f"reference evaluated after each epoch: {sorted(REF_EVAL)}")
check(sorted(REF_CK) == list(range(3, STEPS, 3)) + [STEPS], f"reference wrote checkpoints {sorted(REF_CK)}")
step_s = (REF_END["train_s"] / STEPS) if REF_END.get("train_s") else 0.1
print(f"reference: {STEPS} steps, ~{step_s * 1000:.0f} ms per step", flush=True)


def trial(i):
    t_trial = time.time()
    rng = random.Random(f"{SEED}:{i}")
    kind = KINDS[i % len(KINDS)]
    # Kills inside a write: every target once in 4 such trials; writes slowed so that the kill lands inside.
    slow = kind in ("write", "double1st")
    delay_ms = rng.choice([150, 300]) if slow else 0
    env = faults(ckpt_write_delay_ms=delay_ms) if slow else {}
    write_target = TARGETS[(i // len(KINDS) + (2 if kind == "double1st" else 0)) % len(TARGETS)]
    shutil.rmtree(WORK, ignore_errors=True)
    problems, kills, attempts = [], [], []

    def kill_once(a, how):
        """SIGKILLs attempt a as `how` says; the target, or None when the kill did not land."""
        if how in ("write", "first_write"):
            target = write_target if kind in ("write", "double1st") else rng.choice(TARGETS)
            what = kill_in_write(a, rng, target, how == "first_write", delay_ms / 1000)
        else:
            target = {"rank": f"rank{rng.randrange(NP)}", "mpirun": "mpirun", "all": "all"}[how]
            what = kill_at_random_moment(a, rng, target, step_s)
        kills.append(what)
        return None if what.startswith("missed") else target

    plan = [kind]
    if kind in ("double", "double1st"):
        plan = [rng.choice(["rank", "mpirun", "all", "write"]),
                rng.choice(["rank", "mpirun", "all"]) if kind == "double" else "first_write"]
    for how in plan + [None] * 3:  # the planned kills, then plain reruns of the same command until it finishes
        a = Attempt(env)
        attempts.append(a)
        n = len(attempts)
        target = kill_once(a, how) if how else None
        rc = a.finish()
        r = a.resumed_from()
        if r == 0 and a.listed:
            problems.append(f"attempt {n} started over with checkpoints {a.listed} on disk")
        if r and a.listed and r < max(a.listed):
            problems.append(f"attempt {n} resumed from step {r} with step {max(a.listed)} on disk")
        for bad in ("trying the previous checkpoint", "moved the invalid checkpoint aside", "is in use by another job"):
            if bad in a.out:
                problems.append(f"attempt {n}: '{bad}'")
        if rc == 124:
            problems.append(f"attempt {n} hung (killed after {ATTEMPT_TIMEOUT} s)")
            print(a.out[-3000:])
            break
        if target is None:
            if rc == 0:
                break
            problems.append(f"attempt {n} (not killed) exit {rc}, want 0")
            print(a.out[-3000:])
        elif rc != expected_rc(target):
            problems.append(f"attempt {n} killed ({target}) exit {rc}, want {expected_rc(target)}")
            print(a.out[-3000:])
    if all(k.startswith("missed") for k in kills):
        problems.append("no kill landed: " + " ; ".join(kills))
    if attempts[-1].rc != 0:
        problems.append(f"the run did not finish (last exit {attempts[-1].rc})")
    resumed = [str(a.resumed_from()) for a in attempts if a.resumed_from() is not None]

    # No process left behind (mpirun's ranks outlive it by about a second).
    t = time.time()
    while time.time() - t < 15 and (any(alive(p) for a in attempts for p in a.pids()) or hpctrain_pids_of_work()):
        time.sleep(0.05)
    left = sorted({p for a in attempts for p in a.pids() if alive(p)} | set(hpctrain_pids_of_work()))
    if left:
        problems.append(f"processes left running: {left}")
        for p in left:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass

    # Files: every checkpoint bitwise equal to the reference's of its step; no .bad, no temporary file.
    cks = list_ckpts()
    compared = 0
    for s, path in cks:
        ref_path = ckpt(REF, s)
        if not os.path.exists(ref_path):
            if s not in REF_CK:
                problems.append(f"checkpoint step {s}: the reference wrote none at that step")
            continue  # else pruned from the reference's directory (checkpoint.keep_last)
        ok, why = same_state(ref_path, path, ignore=())
        compared += ok
        if not ok:
            problems.append(f"checkpoint step {s}: {why}")
    if not cks or cks[-1][0] != STEPS:
        problems.append(f"no final checkpoint (steps {[s for s, _ in cks]})")
    elif os.path.exists(os.path.join(WORK, "LATEST")) and latest(WORK) != ckpt(WORK, STEPS):
        problems.append(f"LATEST names {latest(WORK)}")
    cdir = os.path.join(WORK, "checkpoints")
    bad = [f for f in os.listdir(cdir) if f.endswith(".bad")] if os.path.isdir(cdir) else []
    if bad:
        problems.append(f"quarantined checkpoints: {bad}")
    if temporaries():
        problems.append(f"temporary files left: {temporaries()}")

    # metrics.jsonl: every record (before and after each kill) equal to the reference's.
    events = metric_events(WORK)
    steps = [j for j in events if j.get("event") == "step"]
    wrong = [j["step"] for j in steps if j["loss"] != REF_LOSS.get(j["step"])]
    if wrong:
        problems.append(f"loss differs at steps {sorted(set(wrong))[:8]}")
    if sorted({j["step"] for j in steps}) != list(range(1, STEPS + 1)):
        problems.append("not every step 1..%d logged" % STEPS)
    ev = [j for j in events if j.get("event") == "eval"]
    wrong = [j["step"] for j in ev if REF_EVAL.get(j["step"]) != (j["loss"], j["top1"])]
    if wrong:
        problems.append(f"evaluation differs at steps {sorted(set(wrong))}")
    if {j["step"] for j in ev} != set(REF_EVAL):  # a resume from an epoch's last step evaluates that epoch
        problems.append(f"evaluations logged at steps {sorted({j['step'] for j in ev})}, want {sorted(REF_EVAL)}")
    # The final test loss and top-1 in the last run_end: a rerun that resumes from the final
    # checkpoint (every rank killed after it, before run_end) trains nothing and evaluates the final
    # model again (docs/metrics.md), bitwise as the reference did.
    ends = [j for j in events if j.get("event") == "run_end"]
    got = (ends[-1]["test_loss"], ends[-1]["test_top1"]) if ends else None
    if got != (REF_END["test_loss"], REF_END["test_top1"]):
        problems.append(f"final test loss, top-1 {got} vs {(REF_END['test_loss'], REF_END['test_top1'])}")
    if not ends or ends[-1]["exit_code"] != 0 or ends[-1]["steps"] != STEPS:
        problems.append(f"last run_end: {ends[-1] if ends else None}")

    verdict = "ok" if not problems else "FAIL"
    cleaned = sum(a.out.count("removed leftover temporary file") for a in attempts)
    row = (i, kind + (f" (writes +{delay_ms} ms)" if slow else ""), " ; ".join(kills), ",".join(resumed) or "-",
           " ".join(str(a.rc) for a in attempts), cleaned, f"{compared} ckpts", f"{time.time() - t_trial:.0f} s",
           verdict)
    check(not problems, f"trial {i} ({kind}): bitwise exact after {len(kills)} kill(s), resumed from {row[3]}, "
                        f"{compared} checkpoints equal" + ("" if not problems else ": " + "; ".join(problems)))
    return row


T0 = time.time()
rows = [trial(i) for i in range(TRIALS) if not ONLY or i in ONLY]
print(f"\nrandom-kill, seed {SEED}, {len(rows)} trials in {time.time() - T0:.0f} s. Reproduce one with "
      f"HT_KILL_SEED={SEED} HT_KILL_ONLY=<trial> HT_BIN=build/hpctrain /usr/bin/python3 tests/ckpt/test_random_kill.py")
hdr = ("trial", "kind", "kills (target, time since launch, where)", "resumed from", "exit codes", "tmp removed",
       "equal", "time", "verdict")
print(" | ".join(hdr))
for r in rows:
    print(" | ".join(str(x) for x in r))
if len(rows) >= len(KINDS):
    check(sum(r[5] for r in rows) >= 1,
          "some kill landed inside a checkpoint write (a leftover temporary file was removed by the rerun)")
shutil.rmtree(REF, ignore_errors=True)
finish()
