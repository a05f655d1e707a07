#!/usr/bin/python3
"""Multi-rank training tests driving the hpctrain binary under mpirun (issue: CPU engine).

usage: train_tests.py dp_exactness | uneven | rank_failure | nan_skip | quick_convergence | bad_data | test_seams |
       model_mismatch
Environment (set by ctest): HT_BIN (hpctrain), HT_MPIEXEC (mpirun), OMPI_* for root/oversubscribe.
"""
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "dataset"))
from common import records, train_flags  # noqa: E402  (metrics.jsonl records, flags over defaults)

HT = os.environ["HT_BIN"]
MPIRUN = os.environ.get("HT_MPIEXEC", "mpirun")


def run(np_, args, timeout=240, expect=0, faults=None):
    """mpirun -np np_ hpctrain train ARGS; `faults` ("name=value;...") goes to HT_TEST_FAULTS."""
    cmd = [MPIRUN, "--oversubscribe", "--bind-to", "none", "-np", str(np_), HT, "train"] + args
    env = dict(os.environ, **({"HT_TEST_FAULTS": faults} if faults else {}))
    t0 = time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout, env=env)
    dt = time.time() - t0
    if expect is not None and p.returncode != expect:
        print(p.stdout)
        raise SystemExit(f"FAIL: {' '.join(cmd)} exited {p.returncode}, expected {expect}")
    return p, dt


def base(run_dir, *extra):
    """Flags for a small synthetic run; later flags in `extra` replace the defaults."""
    return train_flags({"--data.synthetic": "true", "--data.synthetic_samples": "2048", "--data.synthetic_height": "8",
                        "--data.synthetic_width": "8", "--data.synthetic_channels": "1", "--model.name": "mlp",
                        "--model.mlp_hidden": "32", "--run.dir": run_dir, "--run.seed": "7", "--train.device": "cpu",
                        "--train.threads": "1", "--train.log_every_steps": "10"}, extra)


def dp_exactness(tmp):
    """mlp, 20 steps, global batch 64: losses at every step within 1e-5 relative for world_size
    1, 2 and 4, and identical parameters on every rank after each step."""
    losses = {}
    for np_ in (1, 2, 4):
        d = os.path.join(tmp, f"np{np_}")
        run(np_, base(d, "--train.global_batch", "64", "--train.max_steps", "20", "--train.epochs", "0",
                      "--dist.check_replicas_every", "1", "--optim.lr", "0.05"))
        steps = records(d, "step")
        assert len(steps) == 20, f"world_size {np_}: {len(steps)} step records"
        assert all(s["replicas_identical"] for s in steps), "parameters differ between ranks"
        losses[np_] = [s["loss"] for s in steps]
    for np_ in (2, 4):
        for i, (a, b) in enumerate(zip(losses[1], losses[np_])):
            rel = abs(a - b) / abs(a)
            assert rel <= 1e-5, f"step {i + 1}: world_size 1 loss {a} vs world_size {np_} loss {b} (rel {rel:.2e})"
    assert losses[1][-1] < losses[1][0], "loss did not decrease"
    print("losses agree within 1e-5 for world_size 1, 2, 4:", losses[1][0], "->", losses[1][-1])


def uneven(tmp):
    """1001 train samples, 4 ranks, global batch 32: every rank runs the same 31 steps per epoch
    (remainder of 9 dropped, logged) and the job finishes."""
    d = os.path.join(tmp, "uneven")
    p, _ = run(4, base(d, "--data.synthetic_samples", "1001", "--train.global_batch", "32", "--train.epochs", "2"))
    steps = records(d, "step")
    assert len(steps) == 62, f"{len(steps)} steps, expected 2 x floor(1001/32) = 62"
    assert "last 9 samples" in p.stdout, "remainder policy not logged"
    evals = records(d, "eval")
    assert len(evals) == 2 and all(e["samples"] == 250 for e in evals), evals  # 1001 // 4 test samples
    assert records(d, "run_end")[0]["status"] == "finished"
    print("uneven: 62 steps on every rank, eval over all 250 test samples")


def rank_failure(tmp):
    """A rank that fails at step 5 of 4 ranks ends the whole job, non-zero, naming it, within 30 s."""
    d = os.path.join(tmp, "fail")
    p, dt = run(4, base(d, "--train.global_batch", "64", "--train.epochs", "1"), timeout=60, expect=None,
                faults="fail_at_step=5;fail_rank=2")
    assert p.returncode != 0, "job with a failed rank exited 0"
    assert "rank 2" in p.stdout and "step 5" in p.stdout, p.stdout[-2000:]
    assert dt < 30, f"job took {dt:.1f} s to end"
    print(f"rank failure: exit {p.returncode} after {dt:.1f} s")


def nan_skip(tmp):
    """NaN in one rank's input at step 3: all ranks skip that step together, the run continues."""
    d = os.path.join(tmp, "nan")
    run(2, base(d, "--train.global_batch", "64", "--train.max_steps", "8", "--train.epochs", "0",
                "--dist.check_replicas_every", "1"), faults="nan_at_step=3;nan_rank=1")
    steps = records(d, "step")
    skipped = [s for s in steps if s["skipped"]]
    assert len(skipped) == 1 and skipped[0]["step"] == 4, skipped
    applied = [s for s in steps if not s["skipped"]]
    assert len(applied) == 8 and all(s["loss"] is not None for s in applied)
    end = records(d, "run_end")[0]
    assert end["nonfinite_steps"] == 1 and end["steps"] == 8
    print("nan: one step skipped on both ranks, 8 steps applied")


def quick_convergence(tmp):
    """fmnist_cnn with gradient accumulation on synthetic data learns (loss falls, accuracy above chance)."""
    d = os.path.join(tmp, "conv")
    run(2, base(d, "--model.name", "fmnist_cnn", "--data.synthetic_height", "12", "--data.synthetic_width", "12",
                "--train.global_batch", "64", "--train.accumulation_steps", "2", "--train.epochs", "2",
                "--optim.lr", "0.05"))
    ev = records(d, "eval")
    assert ev[-1]["top1"] > 0.3, ev
    print("fmnist_cnn synthetic top1", ev[-1]["top1"])


def write_idx(path, arr, magic):
    import struct
    with open(path, "wb") as f:
        f.write(struct.pack(">I", magic))
        for d in arr.shape:
            f.write(struct.pack(">I", d))
        f.write(arr.tobytes())


def bad_data(tmp):
    """A zero-byte train shard: every rank exits 2 naming the file (agreed, no MPI_Abort, no hang)."""
    import numpy as np
    src, data = os.path.join(tmp, "idx"), os.path.join(tmp, "data")
    os.makedirs(src)
    rng = np.random.default_rng(0)
    for split, n in (("train", 64), ("t10k", 16)):
        write_idx(os.path.join(src, f"{split}-images-idx3-ubyte"), rng.integers(0, 256, (n, 28, 28), dtype=np.uint8), 0x803)
        write_idx(os.path.join(src, f"{split}-labels-idx1-ubyte"), rng.integers(0, 10, (n,), dtype=np.uint8), 0x801)
    subprocess.run([HT, "prepare", "--format", "fashion-mnist", "--input", src, "--output", data, "--shards", "2"],
                   check=True, stdout=subprocess.DEVNULL)
    open(os.path.join(data, "train-00001-of-00002.h5"), "w").close()
    p, dt = run(2, ["--data.dir", data, "--run.dir", os.path.join(tmp, "run"), "--train.device", "cpu",
                    "--train.global_batch", "16"], timeout=60, expect=2)
    for r in (0, 1):
        assert f"error (rank {r}): " in p.stdout and "train-00001-of-00002.h5" in p.stdout, p.stdout[-2000:]
    print(f"bad data: exit 2 on both ranks naming the shard ({dt:.1f} s)")

    # A test split of 0 samples with evaluation on: exit 2 on both ranks (it used to "evaluate" nothing).
    empty = os.path.join(tmp, "empty_test")
    os.makedirs(empty)
    from common import write_shard  # h5py writer of the shard schema (tests/dataset, on sys.path above)
    write_shard(os.path.join(empty, "train-00000-of-00001.h5"), rng.integers(0, 256, (64, 28, 28, 1), dtype=np.uint8),
                rng.integers(0, 10, 64).astype(np.int32))
    write_shard(os.path.join(empty, "test-00000-of-00001.h5"), np.zeros((0, 28, 28, 1), np.uint8), np.zeros(0, np.int32), chunks=None,
                split="test")
    p, _ = run(2, ["--data.dir", empty, "--run.dir", os.path.join(tmp, "run_empty"), "--train.device", "cpu",
                   "--train.global_batch", "16"], timeout=60, expect=2)
    for r in (0, 1):
        assert f"error (rank {r}): train.eval = true, but the test split of data.dir = {empty} has 0 samples" in p.stdout, \
            p.stdout[-2000:]
    print("empty test split: exit 2 on both ranks")


REMOVED_KEYS = ("fail_at_step", "fail_rank", "nan_at_step", "nan_rank", "test_write_delay_ms", "test_signal_at_step",
                "test_signal_rank")


def test_seams(tmp):
    """Fault injection is not configuration: --help, config.ini and the run_start config (the text the
    checkpoint's config hash is taken over) name none of the test-only keys, which are now unknown
    keys; HT_TEST_FAULTS injects instead, rank 0 warns once on stderr, and an unknown fault name
    exits 2 naming it."""
    h = subprocess.run([HT, "train", "--help"], capture_output=True, text=True, timeout=60)
    assert h.returncode == 0 and "--train.max_steps" in h.stdout and "--checkpoint.every_steps" in h.stdout, h.stdout
    for k in REMOVED_KEYS:
        assert k not in h.stdout + h.stderr, f"--help lists {k}"
    d = os.path.join(tmp, "seams")
    spec = "fail_at_step=1000;nan_at_step=1000"  # active, but past the end of the run
    cmd = [MPIRUN, "--oversubscribe", "--bind-to", "none", "-np", "2", HT, "train"] + base(
        d, "--train.global_batch", "64", "--train.max_steps", "2", "--train.epochs", "0", "--train.eval", "false")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=dict(os.environ, HT_TEST_FAULTS=spec))
    assert p.returncode == 0, p.stdout + p.stderr
    warn = [l for l in p.stderr.splitlines() if "HT_TEST_FAULTS is set" in l]
    assert warn == ["hpctrain: warning: HT_TEST_FAULTS is set: injecting faults: " + spec], p.stderr
    assert "HT_TEST_FAULTS" not in p.stdout, "the warning belongs on stderr"
    ini = open(os.path.join(d, "config.ini")).read()
    start = records(d, "run_start")[0]
    start_cfg = start["config"]
    # The build that made the run (docs/metrics.md): the same commit and library versions as --version.
    ver = subprocess.run([HT, "--version"], capture_output=True, text=True, timeout=60).stdout
    assert start["build"]["commit"] in ver.splitlines()[1] and start["build"]["version"] in ver.splitlines()[0], (start["build"], ver)
    assert set(start["libraries"]) >= {"mpi", "hdf5", "onednn"} and start["libraries"]["hdf5"] in ver, (start["libraries"], ver)
    assert "[checkpoint]" in ini and "max_steps = 2" in ini and start_cfg == ini, ini
    for k in REMOVED_KEYS:
        assert k not in ini, f"config.ini has {k}"
    p, _ = run(2, base(os.path.join(tmp, "old_key"), "--train.fail_at_step", "3"), timeout=60, expect=2)
    assert "unknown config key 'train.fail_at_step'" in p.stdout, p.stdout[-2000:]
    p, _ = run(2, base(os.path.join(tmp, "typo")), timeout=60, expect=2, faults="fail_at_stpe=3")
    assert "HT_TEST_FAULTS: unknown fault 'fail_at_stpe'" in p.stdout, p.stdout[-2000:]
    print("test seams: no test-only key in --help or config.ini; HT_TEST_FAULTS warns once; a typo exits 2")


def model_mismatch(tmp):
    """Ranks launched with different models (a per-rank argument list): every rank exits 2 before any
    collective sized by the model, and the differing rank names itself, rank 0 and both values."""
    d = os.path.join(tmp, "mismatch")
    common = ["--oversubscribe", "--bind-to", "none"]
    cmd = [MPIRUN] + common + ["-np", "1", HT, "train"] + base(d, "--train.max_steps", "3") + [":"] + \
          ["-np", "1", HT, "train"] + base(d, "--train.max_steps", "3", "--model.mlp_hidden", "16")
    t0 = time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    dt = time.time() - t0
    out = p.stdout
    assert p.returncode == 2, f"exit {p.returncode}, expected 2:\n{out[-3000:]}"
    assert "the ranks build different models" in out and "rank 1 has parameters" in out, out[-3000:]
    assert "rank 0 has parameters" in out, out[-3000:]
    for bad in ("double free", "MPI_ERR_TRUNCATE", "Segmentation"):
        assert bad not in out, out[-3000:]
    print(f"model mismatch: exit 2 on every rank after {dt:.1f} s")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        globals()[sys.argv[1]](tmp)
