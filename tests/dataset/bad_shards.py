"""Malformed shards: `mpirun -np 2 hpctrain inspect --validate DIR` must exit 2 on every rank, each
rank naming the file and the problem, without hanging (each run has a timeout)."""
import os
import tempfile

import numpy as np

from common import LIBVER, check, finish, run, write_shard

rng = np.random.default_rng(0)


def images(n, h=4, w=5, c=1):
    return rng.integers(0, 256, size=(n, h, w, c), dtype=np.uint8)


def labels(n, classes=10):
    return rng.integers(0, classes, size=n).astype(np.int32)


def make_dir(root, name, shard1=None):
    """Two train shards of 100 samples; shard1(path) may replace the second with a bad one."""
    d = os.path.join(root, name)
    os.makedirs(d)
    write_shard(os.path.join(d, "train-00000-of-00002.h5"), images(100), labels(100), index=0, num=2)
    p1 = os.path.join(d, "train-00001-of-00002.h5")
    if shard1:
        shard1(p1)
    else:
        write_shard(p1, images(100), labels(100), index=1, num=2)
    return d, p1


def with_label(value, row):
    def f(p):
        lab = labels(100)
        lab[row] = value
        write_shard(p, images(100), lab, index=1, num=2)
    return f


def truncated(p):
    write_shard(p, images(100), labels(100), index=1, num=2)
    size = os.path.getsize(p)
    with open(p, "r+b") as fh:
        fh.truncate(size // 2)


def declared_only(shape, attrs=None):
    """A shard whose /images declares `shape` (chunked, never written: the file stays small)."""
    def f(p):
        import h5py
        write_shard(p, images(100), labels(100), index=1, num=2, attrs=attrs)
        with h5py.File(p, "r+", libver=LIBVER) as fh:
            del fh["images"]
            fh.create_dataset("images", shape=shape, dtype=np.uint8, chunks=(1,) + tuple(min(s, 64) for s in shape[1:]))
            if shape[0] != 100:
                del fh["labels"]
                fh.create_dataset("labels", shape=(shape[0],), dtype=np.int32, chunks=(min(1024, shape[0]),))
    return f


CASES = [
    # Sizes are untrusted: checked before any arithmetic or allocation (ASan/UBSan found overflows here).
    ("side_2_32", declared_only((4, 2**32, 2**32, 1), dict(height=2**32, width=2**32)),
     ["root attribute height = 4294967296, must be in [1, 65536]"]),
    ("images_never_written", declared_only((100, 4, 5, 1)),
     ["dataset /images declares 2000 bytes but 0 are stored"]),
    ("rows_2_36_unwritten", declared_only((2**36, 4, 5, 1)),
     ["dataset /images declares 1374389534720 bytes but 0 are stored"]),
    ("length_mismatch", lambda p: write_shard(p, images(100), labels(98), index=1, num=2),
     ["/images has 100 samples but /labels has 98"]),
    ("labels_float64", lambda p: write_shard(p, images(100), labels(100).astype(np.float64), index=1, num=2),
     ["/labels has dtype float64", "expected int32"]),
    ("label_eq_num_classes", with_label(10, 17), ["/labels row 17 has value 10", "num_classes=10"]),
    ("label_minus_one", with_label(-1, 3), ["/labels row 3 has value -1"]),
    ("truncated", truncated, ["truncated"]),
    ("zero_bytes", lambda p: open(p, "wb").close(), ["empty file (0 bytes)"]),
    ("hw_differs", lambda p: write_shard(p, images(100, h=6, w=3), labels(100), index=1, num=2),
     ["H=6 W=3 C=1", "H=4 W=5 C=1", "train-00000-of-00002.h5"]),
]

with tempfile.TemporaryDirectory() as root:
    good, _ = make_dir(root, "good")
    rc, out, err = run(["inspect", "--validate", good, "--split", "train"], np_ranks=2)
    check(rc == 0, f"valid dataset: rc {rc}, stderr: {err}")
    check("200 samples" in out, f"valid dataset summary: {out}")

    for name, make, fragments in CASES:
        d, bad = make_dir(root, name, make)
        rc, out, err = run(["inspect", "--validate", d, "--split", "train"], np_ranks=2)
        print(f"--- {name}: rc {rc}\n{err.strip()}", flush=True)
        check(rc == 2, f"{name}: exit code {rc}, expected 2")
        for rank in (0, 1):
            lines = [l for l in err.splitlines() if f"(rank {rank})" in l]
            check(len(lines) == 1, f"{name}: rank {rank} printed {len(lines)} error lines")
            if lines:
                check(bad in lines[0], f"{name}: rank {rank} message does not name {bad}: {lines[0]}")
                for frag in fragments:
                    check(frag in lines[0], f"{name}: rank {rank} message lacks '{frag}': {lines[0]}")

    # A single bad shard through `inspect PATH` as well (one rank): exit 2, names file and row.
    d, bad = make_dir(root, "single", with_label(-1, 3))
    rc, out, err = run(["inspect", bad])
    check(rc == 2 and "row 3 has value -1" in err and bad in err, f"inspect PATH: rc {rc} {err}")
finish()
