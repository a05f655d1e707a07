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


def make_dir(root, name, shard1=None, attrs=None):
    """Two train shards of 100 samples; shard1(path) may replace the second with a bad one; attrs
    override root attributes of both (a statistic that is wrong everywhere passes the comparison of shards)."""
    d = os.path.join(root, name)
    os.makedirs(d)
    write_shard(os.path.join(d, "train-00000-of-00002.h5"), images(100), labels(100), index=0, num=2, attrs=attrs)
    p1 = os.path.join(d, "train-00001-of-00002.h5")
    if shard1:
        shard1(p1)
    else:
        write_shard(p1, images(100), labels(100), index=1, num=2, attrs=attrs)
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



def rewrite_images(make):
    """A valid shard whose /images is then replaced by make(file, data) (same samples, other storage)."""
    def f(p):
        import h5py
        data = images(100)
        write_shard(p, data, labels(100), index=1, num=2)
        with h5py.File(p, "r+", libver=LIBVER) as fh:
            del fh["images"]
            make(fh, data, p)
    return f


def external_truncated(fh, data, p):
    """/images in an external raw file (H5Pset_external) cut to half: HDF5 reads the rest as zeros."""
    raw = p + ".raw"
    fh.create_dataset("images", shape=data.shape, dtype=np.uint8, external=[(raw, 0, data.nbytes)])
    fh["images"][...] = data
    fh.flush()
    with open(raw, "r+b") as r:
        r.truncate(data.nbytes // 2)


def virtual(fh, data, p):
    """/images a virtual dataset over another file's dataset."""
    import h5py
    src = p + ".src.h5"
    with h5py.File(src, "w", libver=LIBVER) as s:
        s.create_dataset("x", data=data)
    layout = h5py.VirtualLayout(shape=data.shape, dtype=np.uint8)
    layout[...] = h5py.VirtualSource(src, "x", shape=data.shape)
    fh.create_virtual_dataset("images", layout)


def chunks_missing(fh, data, p):
    """Chunks (100,3,4,1) over [100,4,5,1]: 4 chunks; the one at (h 3, w 4) never written. The 3 stored
    hold more bytes than the dataset declares, so only counting chunks finds it; it reads as the fill value."""
    d = fh.create_dataset("images", shape=data.shape, dtype=np.uint8, chunks=(100, 3, 4, 1))
    d[:, :, :4] = data[:, :, :4]
    d[:, :3, 4:] = data[:, :3, 4:]


def gzip_chunks_missing(fh, data, p):
    """Compressed, chunks of 8 rows; rows 8..91 never written (read as the fill value, first/last rows fine)."""
    d = fh.create_dataset("images", shape=data.shape, dtype=np.uint8, chunks=(8, 4, 5, 1), compression="gzip")
    d[:8] = data[:8]
    d[92:] = data[92:]


def four_bit(fh, data, p):
    """/images of a 1-byte unsigned integer type with 4 value bits (HDF5 converts, raw reads would not)."""
    import h5py
    t = h5py.h5t.STD_U8LE.copy()
    t.set_precision(4)
    space = h5py.h5s.create_simple(data.shape)
    h5py.h5d.create(fh.id, b"images", t, space).write(h5py.h5s.ALL, h5py.h5s.ALL, data % 16)


def with_filter(**kw):
    """/labels with HDF5 filter arguments `kw` (e.g. scaleoffset: a built-in filter shards never use)."""
    def f(p):
        import h5py
        write_shard(p, images(100), labels(100), index=1, num=2)
        with h5py.File(p, "r+", libver=LIBVER) as fh:
            lab = fh["labels"][...]
            del fh["labels"]
            fh.create_dataset("labels", data=lab, chunks=(50,), **kw)
    return f


def v2_superblock_0(p):
    """Marked version 2 but written in HDF5's oldest format (h5py's default libver)."""
    import h5py
    write_shard(p, images(100), labels(100), index=1, num=2, version=2)
    tmp = p + ".old.h5"
    with h5py.File(p, "r") as src, h5py.File(tmp, "w") as dst:
        for k in ("images", "labels"):
            dst.create_dataset(k, data=src[k][...])
        for k, v in src.attrs.items():
            dst.attrs[k] = v
    os.replace(tmp, p)


def v2_vlen_attr(name):
    """Version 2, HDF5 1.10 format, but root attribute `name` a variable-length string."""
    def f(p):
        import h5py
        write_shard(p, images(100), labels(100), index=1, num=2, version=2)
        with h5py.File(p, "r+", libver=LIBVER) as fh:
            v = fh.attrs[name]
            del fh.attrs[name]
            fh.attrs[name] = [x.decode() for x in v] if isinstance(v, np.ndarray) else v.decode()
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
    # Storage the reader does not read from: data outside the file, unexpected filters, missing chunks.
    ("images_external_truncated", rewrite_images(external_truncated),
     ["dataset /images has layout external", ".raw", "must be inside the shard file"]),
    ("images_virtual", rewrite_images(virtual), ["dataset /images has layout virtual"]),
    ("images_chunk_missing", rewrite_images(chunks_missing),
     ["dataset /images has 3 of its 4 chunks stored", "fill value"]),
    ("images_gzip_chunks_missing", rewrite_images(gzip_chunks_missing),
     ["dataset /images has 3 of its 13 chunks stored"]),
    ("images_4_bit", rewrite_images(four_bit), ["dataset /images has dtype uint8 with 4 value bits", "plain uint8"]),
    ("labels_scaleoffset", with_filter(scaleoffset=0), ["dataset /labels uses HDF5 filter 6 (scaleoffset)"]),
    # Version 2 promises checksummed metadata and no variable-length data; a file that breaks it is named.
    ("v2_superblock_0", v2_superblock_0, ["root attribute version = 2 but the file has HDF5 superblock version 0"]),
    ("v2_vlen_split", v2_vlen_attr("split"),
     ["root group attribute 'split' is a variable-length string", "fixed-length strings only"]),
    ("v2_vlen_class_names", v2_vlen_attr("class_names"), ["root group attribute 'class_names' is a variable-length string"]),
    ("hw_differs", lambda p: write_shard(p, images(100, h=6, w=3), labels(100), index=1, num=2),
     ["H=6 W=3 C=1", "H=4 W=5 C=1", "train-00000-of-00002.h5"]),
]

# Per-channel statistics wrong in every shard (so the shards agree): every normalised pixel must be
# finite (a NaN/inf std or mean, or a denormal std whose reciprocal is inf, would train on NaN). The
# first shard is named.
STAT_CASES = [
    ("std_inf", dict(std=np.float32([np.inf])), ["root attribute std[0] = inf, must be finite and > 0"]),
    ("std_nan", dict(std=np.float32([np.nan])), ["root attribute std[0] = nan, must be finite and > 0"]),
    ("std_denormal", dict(std=np.float32([1e-40])),
     ["std[0] = 9.9999461e-41", "normalise pixel value 0 to a non-finite value"]),
    ("mean_inf", dict(mean=np.float32([-np.inf])), ["root attribute mean[0] = -inf, must be finite"]),
]

with tempfile.TemporaryDirectory() as root:
    good, _ = make_dir(root, "good")
    rc, out, err = run(["inspect", "--validate", good, "--split", "train"], np_ranks=2)
    check(rc == 0, f"valid dataset: rc {rc}, stderr: {err}")
    check("200 samples" in out, f"valid dataset summary: {out}")

    for name, make, fragments in CASES + STAT_CASES:
        if isinstance(make, dict):
            d, _ = make_dir(root, name, attrs=make)
            bad = os.path.join(d, "train-00000-of-00002.h5")
        else:
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
                # File locking is advised only when HDF5 failed to lock (dataset/locked_shard.py), not
                # for every failure whose text holds "lock" (HDF5's "sblock->base_addr" of a truncated file).
                check("HDF5_USE_FILE_LOCKING" not in lines[0], f"{name}: rank {rank} blames file locking: {lines[0]}")

    # The test split's statistics must be the train split's (docs/dataset.md: the same values in every
    # shard, test shards included): compared across splits too, naming a shard of each.
    d, _ = make_dir(root, "test_std_differs")
    test = os.path.join(d, "test-00000-of-00001.h5")
    write_shard(test, images(20), labels(20), split="test", attrs=dict(std=np.float32([0.3])))
    rc, out, err = run(["inspect", "--validate", d], np_ranks=2)
    lines = [l for l in err.splitlines() if "error (rank" in l]
    check(rc == 2 and len(lines) == 2, f"test split std differs: rc {rc}, {len(lines)} error lines: {err}")
    for l in lines:
        check(test in l and "root attribute std = [0.3] differs from [0.25]" in l and "train-00000-of-00002.h5" in l,
              f"test split std differs: message {l}")

    # A single bad shard through `inspect PATH` as well (one rank): exit 2, names file and row.
    d, bad = make_dir(root, "single", with_label(-1, 3))
    rc, out, err = run(["inspect", bad])
    check(rc == 2 and "row 3 has value -1" in err and bad in err, f"inspect PATH: rc {rc} {err}")
finish()
