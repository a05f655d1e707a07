"""Shards of schema version 1 (HDF5's original format, variable-length strings) still train: the
fixture written by `hpctrain prepare` before version 2 (tests/dataset/fixtures/v1) and shards written
the old way with h5py, on 2 ranks, with exactly one warning per run naming a file and suggesting
`hpctrain prepare`; shards `prepare` writes now are version 2 and train without the warning."""
import os
import shutil
import tempfile

import numpy as np

from common import check, finish, run, write_shard

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG = os.path.join(HERE, "../../configs/fmnist_cnn.ini")
WARNING = "are in shard format version 1"


def train(data, run_dir):
    return run(["train", "--config", CONFIG, "--data.dir", data, "--run.dir", run_dir, "--train.max_steps", "2",
                "--train.global_batch", "4", "--train.device", "cpu"], np_ranks=2, timeout=180)


def warnings(text):
    return [l for l in text.splitlines() if WARNING in l]


with tempfile.TemporaryDirectory() as root:
    # 1. The shards prepare wrote before version 2, byte for byte.
    old = os.path.join(root, "v1_prepare")
    shutil.copytree(os.path.join(HERE, "fixtures", "v1"), old)
    rc, out, err = train(old, os.path.join(root, "run1"))
    check(rc == 0, f"training on the version-1 fixture exits 0 (got {rc}): {err[-1500:]}")
    check("done: 2 steps" in out, f"version-1 fixture: 2 steps trained: {out[-500:]}")
    w = warnings(err)
    check(len(w) == 1, f"version-1 fixture: one warning per run, got {len(w)}: {w}")
    if w:
        check("3 shard(s)" in w[0] and old in w[0] and "re-run 'hpctrain prepare'" in w[0], f"warning text: {w[0]}")
    rc, out, err = run(["inspect", os.path.join(old, "train-00000-of-00002.h5")])
    check(rc == 0 and "valid hpctrain-dataset shard" in out, f"inspect of a version-1 shard: rc {rc} {err}")

    # 2. Shards written the old way by another tool (h5py's default libver, variable-length strings).
    rng = np.random.default_rng(3)
    h5 = os.path.join(root, "v1_h5py")
    os.makedirs(h5)
    for split, n, num in (("train", 12, 2), ("test", 4, 1)):
        for k in range(num):
            write_shard(os.path.join(h5, f"{split}-{k:05d}-of-{num:05d}.h5"),
                        rng.integers(0, 256, (n // num, 28, 28, 1), dtype=np.uint8),
                        rng.integers(0, 10, n // num).astype(np.int32), split=split, index=k, num=num, version=1)
    rc, out, err = train(h5, os.path.join(root, "run2"))
    check(rc == 0 and "done: 2 steps" in out, f"training on h5py version-1 shards: rc {rc} {err[-1500:]}")
    check(len(warnings(err)) == 1, f"h5py version-1 shards: one warning, got {warnings(err)}")

    # 3. prepare writes version 2 now: no warning.
    idx_dir, new = os.path.join(root, "idx"), os.path.join(root, "v2")
    os.makedirs(idx_dir)
    for name, arr in (("train-images-idx3-ubyte", rng.integers(0, 256, (8, 28, 28))),
                      ("train-labels-idx1-ubyte", np.arange(8) % 10),
                      ("t10k-images-idx3-ubyte", rng.integers(0, 256, (4, 28, 28))),
                      ("t10k-labels-idx1-ubyte", np.arange(4) % 10)):
        a = arr.astype(np.uint8)
        with open(os.path.join(idx_dir, name), "wb") as f:
            f.write(bytes([0, 0, 8, a.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in a.shape) + a.tobytes())
    rc, out, err = run(["prepare", "--format", "fashion-mnist", "--input", idx_dir, "--output", new, "--shards", "2"])
    check(rc == 0, f"prepare: rc {rc} {err}")
    rc, out, err = train(new, os.path.join(root, "run3"))
    check(rc == 0 and "done: 2 steps" in out, f"training on version-2 shards: rc {rc} {err[-1500:]}")
    check(not warnings(err), f"version-2 shards: no format warning: {warnings(err)}")

    # 4. A dataset without a test split trains with train.eval = false (the split is needed only to
    # evaluate), and with evaluation on it is refused naming the split.
    train_only = os.path.join(root, "train_only")
    shutil.copytree(new, train_only)
    for f in os.listdir(train_only):
        if f.startswith("test-"):
            os.remove(os.path.join(train_only, f))
    rc, out, err = run(["train", "--config", CONFIG, "--data.dir", train_only, "--run.dir", os.path.join(root, "run4"),
                        "--train.max_steps", "2", "--train.global_batch", "4", "--train.device", "cpu",
                        "--train.eval", "false"], np_ranks=2, timeout=180)
    check(rc == 0 and "done: 2 steps" in out, f"no test split, train.eval = false: trains (rc {rc}) {err[-1500:]}")
    rc, out, err = train(train_only, os.path.join(root, "run5"))
    check(rc == 2 and "test" in err, f"no test split, train.eval = true: exit 2 naming the split (rc {rc}) {err[-600:]}")

    # A relative data.dir that does not exist: the error says where it was looked for.
    rc, out, err = run(["train", "--config", CONFIG, "--data.dir", "no/such/dataset", "--run.dir",
                        os.path.join(root, "run6"), "--train.max_steps", "1", "--train.device", "cpu"])
    check(rc == 2 and "no/such/dataset: dataset directory does not exist (a relative path is resolved against the "
          f"working directory {os.getcwd()}, not against the config file's directory)" in err,
          f"a missing relative data.dir names the directory it was resolved against (rc {rc}) {err[-600:]}")
finish()
