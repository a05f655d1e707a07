"""tests/mutation/mutants.py: helpers of the structural mutations (h5py): picking, recreating a
dataset, side files (external data)."""
import os

import h5py
import numpy as np


# ---------------------------------------------------------------------------------------------------
# struct mutations: fn(f, r, dst) -> detail text; f is the copy opened "r+"
def pick(r, seq):
    return seq[int(r.integers(len(seq)))]


def recreate(f, name, data=None, shape=None, dtype=None, like=None, **kw):
    """Replaces dataset `name` (keeping chunking and filters of `like` unless kw says otherwise)."""
    like = like if like is not None else (f[name] if name in f else None)
    opts = {}
    if like is not None and isinstance(like, h5py.Dataset) and like.chunks and "chunks" not in kw:
        opts["fletcher32"] = like.fletcher32
        if like.compression:
            opts["compression"] = like.compression
    opts.update(kw)
    if name in f:
        del f[name]
    if data is not None:
        if "chunks" not in opts and opts:
            opts["chunks"] = True
        return f.create_dataset(name, data=data, **opts)
    if "chunks" not in opts:
        opts["chunks"] = tuple(min(int(s), 64) if i else 1 for i, s in enumerate(shape)) if len(shape) > 1 else (min(int(shape[0]) or 1, 1024),)
    return f.create_dataset(name, shape=shape, dtype=dtype, **opts)


def int_attr(v):
    return np.int64(v) if not -2**31 <= v < 2**31 else np.int32(v)


# Where apply() puts side files (external data): set by apply() for the mutant being written.
_SIDE_DIR = [None]


def side_path(dst, what):
    """A side file of the mutant dst (external raw data, a linked file), kept out of dst's directory
    (a dataset directory holds shards only) in the directory apply() was given."""
    d = _SIDE_DIR[0]
    os.makedirs(d, exist_ok=True)
    return os.path.join(d, os.path.basename(dst) + "." + what.replace("/", "_"))


def write_external(f, name, dst, variant, r):
    """`name` rewritten as contiguous data in an external raw file (absolute path): the same bytes,
    or a cut-short, missing or shifted file."""
    arr = f[name][...]
    raw = side_path(dst, name + ".raw")
    with open(raw, "wb") as fh:
        fh.write(arr.tobytes())
    del f[name]
    off = 0
    if variant == "shifted":
        with open(raw, "wb") as fh:
            fh.write(b"\0" * 16 + arr.tobytes())
        off = 8  # points 8 bytes before the real data: different content
    f.create_dataset(name, shape=arr.shape, dtype=arr.dtype, external=[(raw, off, arr.nbytes)])
    if variant == "truncated":
        os.truncate(raw, int(r.integers(0, max(arr.nbytes, 1))))
    elif variant == "missing":
        os.remove(raw)
    return f"{name} in external file {os.path.basename(raw)} ({variant})"
