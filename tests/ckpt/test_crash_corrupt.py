"""Crash safety and corruption (one rank, tiny mlp, checkpoints every 2 steps written slowly).
Crash: SIGKILL the job at 20 random moments (many land inside a slowed checkpoint write); every
rerun must resume from a valid checkpoint, clean the leftover temporary file, and the last run must
finish with parameters bitwise equal to an uninterrupted run.
Corruption: flip bytes inside the newest checkpoint's data, or truncate it: the rerun names it,
falls back to the previous checkpoint and finishes bitwise equal; `hpctrain inspect` reports it."""
import random

from common import *

BASE = ["--data.synthetic", "true", "--data.synthetic_samples", "256", "--data.synthetic_height", "8",
        "--data.synthetic_width", "8", "--data.synthetic_channels", "1", "--model.name", "mlp",
        "--model.mlp_hidden", "32", "--train.global_batch", "16", "--train.epochs", "0", "--train.max_steps", "40",
        "--train.device", "cpu", "--train.eval", "false", "--train.log_every_steps", "1000",
        "--checkpoint.every_steps", "2", "--checkpoint.keep_last", "2"]

ref = fresh_dir("straight")
rc, out = run(BASE + ["--run.dir", ref])
check(rc == 0, f"straight run exits 0 (got {rc})") or print(out)

# ---- crash safety ----
d = fresh_dir("crash")
args = BASE + ["--run.dir", d]
slow = faults(ckpt_write_delay_ms=60)
rng = random.Random(2026)
resumed, cleaned, kills = [], 0, 0
last = 0
for i in range(20):
    p = start(args, env=slow)
    # a random point of the remaining run: after some step, plus up to 80 ms (often inside a write)
    target = min(38, last + rng.randint(1, 3))
    wait_for_step(d, target, p, timeout=60)
    time.sleep(rng.uniform(0, 0.08))
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
        kills += 1
    out, _ = p.communicate()
    cleaned += out.count("removed leftover temporary file")
    for line in out.splitlines():
        if "resumed from" in line:
            resumed.append(int(line.split("step ")[1].split(",")[0]))
    # after every kill, whatever LATEST names must be a complete, checksummed checkpoint
    if os.path.exists(os.path.join(d, "LATEST")):
        try:
            last = state(latest(d))[1]["step"]
        except Exception as e:  # noqa: BLE001
            check(False, f"kill {i}: LATEST names an unreadable checkpoint: {e}")
    if p.returncode == 0:
        break
rc, out = run(args, env=slow)
cleaned += out.count("removed leftover temporary file")
check(rc == 0, f"final rerun finishes (exit {rc})") or print(out)
check(kills >= 10, f"{kills} SIGKILLs landed while the job ran")
check(cleaned >= 1, f"leftover temporary files were cleaned {cleaned} time(s)")
check(resumed == sorted(resumed), f"each rerun resumed at or after the previous one: {resumed}")
check(not any(".tmp." in f for f in os.listdir(os.path.join(d, "checkpoints"))), "no temporary file left")
ok, why = same_state(ckpt(ref, 40), ckpt(d, 40))
check(ok, f"after {kills} kills: final parameters and momentum bitwise equal to the uninterrupted run ({why})")
l = losses(d)
check(all(l[s] == losses(ref)[s] for s in l), "the last loss logged for every step equals the uninterrupted run's")

# ---- corruption: a run stopped at step 30 has checkpoints 28 and 30 ----
base = fresh_dir("stopped")
rc, out = run(BASE + ["--run.dir", base], env=faults(signal_at_step=30))
check(rc == 75, f"stopped run exits 75 (got {rc})")


def flip(path):
    with h5py.File(path, "r") as f:
        ds = f["param/fc1.weight"] if "fc1.weight" in f["param"] else f["param"][sorted(f["param"])[0]]
        off = ds.id.get_chunk_info(0).byte_offset
    with open(path, "r+b") as f:
        f.seek(off + 100)
        b = bytearray(f.read(8))
        f.seek(off + 100)
        f.write(bytes(x ^ 0x5A for x in b))


def truncate(path):
    os.truncate(path, os.path.getsize(path) * 2 // 3)


for name, damage in [("flipped", flip), ("truncated", truncate)]:
    d = fresh_dir(name)
    shutil.copytree(base, d)
    bad = ckpt(d, 30)
    damage(bad)
    p = subprocess.run([HT, "inspect", bad], capture_output=True, text=True)
    check(p.returncode == 2 and "FAILED" in p.stdout + p.stderr, f"{name}: hpctrain inspect exits 2 and says FAILED")
    rc, out = run(BASE + ["--run.dir", d])
    check(rc == 0, f"{name}: rerun finishes (exit {rc})") or print(out)
    check(bad in out and "trying the previous checkpoint" in out, f"{name}: the bad checkpoint is named")
    check(f"resumed from {ckpt(d, 28)}: step 28" in out, f"{name}: resumed from the previous one (step 28)")
    check(os.path.exists(bad + ".bad"), f"{name}: the bad file is kept aside as .bad")
    ok, why = same_state(ckpt(ref, 40), ckpt(d, 40))
    check(ok, f"{name}: final parameters bitwise equal ({why})")

p = subprocess.run([HT, "inspect", ckpt(ref, 40)], capture_output=True, text=True)
check(p.returncode == 0 and "step: 40" in p.stdout and "world_size at save: 1" in p.stdout and "checksums: OK" in p.stdout,
      "inspect on a good checkpoint: step, world_size, checksums OK") or print(p.stdout, p.stderr)
finish()
