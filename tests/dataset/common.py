"""Helpers for the dataset script tests: the hpctrain binary, mpirun, and schema-conformant shards
written with h5py (independently of our C++ writer). Other script tests (train, precision, verify,
report) use its checks, metrics.jsonl reader and command-line flags too."""
import json
import os
import subprocess
import sys

import h5py
import numpy as np

HT = os.environ.get("HT_BIN", "build/hpctrain")
MPIEXEC = os.environ.get("HT_MPIEXEC", "mpirun")
FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what, flush=True)
    return cond


def check_logged(cond, what):
    """check() that also prints each passed check ("ok:   what"), so the log lists every check made."""
    if cond:
        print("ok:   " + what, flush=True)
    return check(cond, what)


def records(run_dir, event):
    """The records of one event ("step", "eval", "run_start", ...) in RUN_DIR/metrics.jsonl, every line parsed."""
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [r for r in map(json.loads, f) if r["event"] == event]


def train_flags(defaults, extra):
    """`hpctrain train` flags: `defaults` (flag -> value) with the FLAG VALUE pairs in `extra` replacing or adding."""
    opts = dict(defaults)
    opts.update(zip(extra[::2], extra[1::2]))
    return [t for kv in opts.items() for t in kv]


def run(args, np_ranks=None, timeout=90):
    cmd = [HT] + args
    if np_ranks:
        cmd = [MPIEXEC, "--oversubscribe", "--bind-to", "none", "-np", str(np_ranks)] + cmd
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, "", "TIMEOUT (hang) running " + " ".join(cmd)
    return p.returncode, p.stdout, p.stderr


# File format of a version-2 shard (docs/dataset.md): HDF5 1.10's, whose metadata carry checksums.
LIBVER = ("v110", "v110")


def fixed(v):
    """An attribute value with every string fixed-length (numpy.bytes_ / dtype 'S'), as version 2 requires."""
    if isinstance(v, str):
        return np.bytes_(v.encode())
    if isinstance(v, (list, tuple)) and v and all(isinstance(x, str) for x in v):
        return np.array([x.encode() for x in v])
    return v


def write_shard(path, images, labels, split="train", index=0, num=1, num_classes=10, attrs=None, version=2,
                **dataset_kw):
    """A shard in schema `version` 2 (HDF5 1.10 format, fixed-length strings), or in version 1 as shards
    were written before (h5py's default, oldest format, variable-length strings). dataset_kw go to
    /images' create_dataset (chunks, compression, external, ...)."""
    libver = LIBVER if version >= 2 else None
    with h5py.File(path, "w", libver=libver) as f:
        n = images.shape[0]
        kw = dict(chunks=(max(1, min(n, 8)),) + images.shape[1:])
        kw.update(dataset_kw)
        f.create_dataset("images", data=images, **kw)
        f.create_dataset("labels", data=labels)
        h, w, c = images.shape[1:]
        a = dict(format="hpctrain-dataset", version=version, split=split, shard_index=index, num_shards=num,
                 num_classes=num_classes, height=h, width=w, channels=c,
                 class_names=[f"c{k}" for k in range(num_classes)],
                 mean=np.full(c, 0.5, np.float32), std=np.full(c, 0.25, np.float32), source="test")
        a.update(attrs or {})
        for k, v in a.items():
            f.attrs[k] = fixed(v) if version >= 2 else v


def finish():
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed", flush=True)
        sys.exit(1)
    print("all checks passed", flush=True)
    sys.exit(0)
