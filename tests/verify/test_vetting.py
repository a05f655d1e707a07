"""Untrusted HDF5 files are vetted in a time-limited child process (docs/verify.md): a shard that
crashes HDF5 1.10 (a global-heap object whose size is 2^55: heap overflow in H5HG_read) or makes it
loop forever (a heap object size one byte too large) must end the training job with exit 2 on every
rank of mpirun -np 2, naming the file, within the time limit, with no core file and no process left.
Before the vetting, the first segfaulted the ranks (exit 139) and the second hung them forever.
Also: a crash while vetting a checkpoint falls back to the previous one; inspect and verify report the
same; the verdict cache in RUN_DIR/verified.tsv skips unchanged files on a restart."""
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "dataset"))
from common import FAILURES, check_logged as check, write_shard  # noqa: E402  (checks; h5py shard writer)

HT = os.path.abspath(os.environ.get("HT_BIN", "build/hpctrain"))
MPIEXEC = os.environ.get("HT_MPIEXEC", "mpirun")
TMP = tempfile.mkdtemp(prefix="ht_vetting_")


def run(args, np_ranks=None, env=None, timeout=120):
    c = [HT] + args
    if np_ranks:
        c = [MPIEXEC, "--oversubscribe", "--bind-to", "none", "-np", str(np_ranks)] + c
    e = dict(os.environ)
    e.update(env or {})
    t0 = time.monotonic()
    try:
        p = subprocess.run(c, capture_output=True, timeout=timeout, env=e, cwd=TMP)
        rc, out, err = p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")
    except subprocess.TimeoutExpired:
        rc, out, err = 124, "", "TIMEOUT running " + " ".join(c)
    return rc, out, err, time.monotonic() - t0


def heap_objects(d):
    """Offsets of the objects of the file's (one) global heap collection, by their bytes."""
    g = d.index(b"GCOL")
    size = struct.unpack("<Q", d[g + 8:g + 16])[0]
    o, out = g + 16, {}
    while o < g + size:
        idx, _, _, sz = struct.unpack("<HHIQ", d[o:o + 16])
        if idx == 0:
            break
        out[bytes(d[o + 16:o + 16 + sz])] = o
        o += 16 + ((sz + 7) // 8) * 8
    return out


def make_dataset(name, corrupt=None):
    """A 4x4x1 dataset (train 64, test 16 samples) written with h5py as version-1 shards are (oldest file
    format, variable-length string attributes). corrupt: 'crash' sets byte 6 of the size of the heap
    object holding class name "c7" to 0xff (size ~2^55); 'hang' sets the low byte of the size of "c8"
    to 0xff. Both found by mutating shards (tests/verify: byte flips of the global heap)."""
    d = os.path.join(TMP, name)
    os.makedirs(d)
    rng = np.random.default_rng(0)
    for split, n in (("train", 64), ("test", 16)):
        write_shard(os.path.join(d, f"{split}-00000-of-00001.h5"), rng.integers(0, 255, (n, 4, 4, 1), dtype=np.uint8),
                    rng.integers(0, 10, n).astype(np.int32), split=split, version=1)
    bad = os.path.join(d, "train-00000-of-00001.h5")
    if corrupt:
        b = bytearray(open(bad, "rb").read())
        objs = heap_objects(b)
        if corrupt == "crash":
            b[objs[b"c7"] + 8 + 6] = 0xFF
        else:
            b[objs[b"c8"] + 8] = 0xFF
        open(bad, "wb").write(b)
    return d, bad


def train_args(data, run, *extra, steps=2):
    return ["train", "--model.name", "mlp", "--data.dir", data, "--run.dir", os.path.join(TMP, run),
            "--train.global_batch", "8", "--train.max_steps", str(steps), "--train.eval", "false"] + list(extra)


def leftovers():
    """Processes (ours) whose command line names this test's directory."""
    p = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True)
    return [l for l in p.stdout.splitlines() if TMP in l and "ps -eo" not in l]


def cores():
    found = []
    for root, _, files in os.walk(TMP):
        found += [os.path.join(root, f) for f in files if f == "core" or f.startswith("core.")]
    return found


def both_ranks_name(err, *words):
    lines = [l for l in err.splitlines() if all(w in l for w in words)]
    return any("(rank 0)" in l for l in lines) and any("(rank 1)" in l for l in lines)


def main():
    if not shutil.which(MPIEXEC) and not os.path.exists(MPIEXEC):
        print("mpirun not found: skipped")
        sys.exit(77)
    good, _ = make_dataset("good")
    crash, crash_file = make_dataset("crash", "crash")
    hang, hang_file = make_dataset("hang", "hang")

    # 1. The shard that crashes HDF5: exit 2 on both ranks, naming the file and the signal.
    rc, out, err, secs = run(train_args(crash, "run_crash"), np_ranks=2, timeout=120)
    check(rc == 2, f"crashing shard: train -np 2 exits 2 (got {rc}, {secs:.1f} s)")
    check(both_ranks_name(err, "HDF5 crashed parsing " + crash_file, "SIGSEGV"),
          "crashing shard: both ranks say 'HDF5 crashed parsing FILE (SIGSEGV'\n" + err[-1500:])
    check(not cores(), f"no core file: {cores()}")
    check(not leftovers(), f"no process left: {leftovers()}")
    check("fork()" not in err, "Open MPI does not warn about fork()")

    # 2. The shard that makes HDF5 loop: exit 2 on both ranks once the time limit (3 s) has passed.
    rc, out, err, secs = run(train_args(hang, "run_hang", "--verify.timeout_s", "3"), np_ranks=2, timeout=120)
    check(rc == 2 and secs < 60, f"looping shard: train -np 2 exits 2 within the limit (got {rc}, {secs:.1f} s)")
    check(both_ranks_name(err, "HDF5 parsing " + hang_file, "did not finish in 3 s"),
          "looping shard: both ranks say 'did not finish in 3 s' naming the file\n" + err[-1500:])
    check(not leftovers(), f"no process left after the time limit: {leftovers()}")

    # 3. inspect and verify reach the same verdicts (exit 2, the same words) without crashing themselves.
    rc, _, err, _ = run(["inspect", crash_file], np_ranks=2)
    check(rc == 2 and both_ranks_name(err, "HDF5 crashed parsing " + crash_file), f"inspect: exit 2 on both ranks (got {rc})")
    rc, _, err, _ = run(["inspect", "--verify-timeout-s", "3", "--validate", hang], np_ranks=2)
    check(rc == 2 and "did not finish" in err, f"inspect --validate: exit 2, 'did not finish' (got {rc})")
    rc, out, err, _ = run(["verify", "--timeout-s", "3", crash_file, hang_file, os.path.join(good, "train-00000-of-00001.h5")])
    check(rc == 2 and "HDF5 crashed parsing " + crash_file in err and "did not finish" in err and ": ok (dataset shard" in out,
          f"verify: exit 2, one line per file (got {rc})\n{out}{err}")

    # 4. Test faults: a vetting child that crashes on rank 1's file only still stops both ranks, naming it.
    rc, out, err, _ = run(train_args(good, "run_fault"), np_ranks=2,
                          env={"HT_TEST_FAULTS": "verify.child_crash=good/test-"})
    check(rc == 2 and both_ranks_name(err, "HDF5 crashed parsing " + os.path.join(good, "test-00000-of-00001.h5")),
          f"a crash in either rank's share is reported by both (got {rc})\n{err[-800:]}")

    # 5. Good data: trains; the restart vets nothing (verdict cache); a checkpoint whose vetting child
    #    crashes is set aside and the previous one is resumed.
    rc, out, err, _ = run(train_args(good, "run_good", "--checkpoint.every_steps", "1"), np_ranks=2)
    check(rc == 0 and "2 vetted in child processes" in out, f"good data trains, 2 files vetted (got {rc})\n{out}{err[-800:]}")
    check(os.path.exists(os.path.join(TMP, "run_good", "verified.tsv")), "verdict cache written")
    rc, out, err, _ = run(train_args(good, "run_good", steps=3), np_ranks=2,
                          env={"HT_TEST_FAULTS": "verify.child_crash=step-00000002"})
    check(rc == 0 and "0 vetted in child processes, 2 unchanged" in out, f"restart: 0 shards vetted (got {rc})\n{out}")
    check("HDF5 crashed parsing " + os.path.join(TMP, "run_good", "checkpoints", "step-00000002.h5") in err and
          "resumed from " + os.path.join(TMP, "run_good", "checkpoints", "step-00000001.h5") in out,
          "a checkpoint whose vetting crashes is rejected; the previous one is resumed\n" + out + err[-800:])
    check(os.path.exists(os.path.join(TMP, "run_good", "checkpoints", "step-00000002.h5.bad")), "the rejected checkpoint is set aside (.bad)")
    check(not cores() and not leftovers(), "no core file, no process left")

    # A checkpoint in a shard's place (named train-*.h5, format = "hpctrain-checkpoint") is a wrong file
    # there, not a valid checkpoint: verify refuses it naming the format.
    misplaced = os.path.join(TMP, "misplaced", "train-00000-of-00001.h5")
    os.makedirs(os.path.dirname(misplaced))
    shutil.copy(os.path.join(TMP, "run_good", "checkpoints", "step-00000001.h5"), misplaced)
    p = subprocess.run([HT, "verify", misplaced], capture_output=True, text=True, timeout=60)
    check(p.returncode == 2 and 'format = "hpctrain-checkpoint"' in p.stdout + p.stderr and "checkpoint: ok" not in p.stdout,
          f"a checkpoint named like a shard is refused naming its format (got {p.returncode})\n{p.stdout}{p.stderr}")

    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed")
        sys.exit(1)
    shutil.rmtree(TMP, ignore_errors=True)
    print("all checks passed")


main()
