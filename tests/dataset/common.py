"""Helpers for the dataset script tests: the hpctrain binary, mpirun, and schema-conformant shards
written with h5py (independently of our C++ writer)."""
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


def run(args, np_ranks=None, timeout=90):
    cmd = [HT] + args
    if np_ranks:
        cmd = [MPIEXEC, "--oversubscribe", "--bind-to", "none", "-np", str(np_ranks)] + cmd
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, "", "TIMEOUT (hang) running " + " ".join(cmd)
    return p.returncode, p.stdout, p.stderr


def write_shard(path, images, labels, split="train", index=0, num=1, num_classes=10, attrs=None):
    with h5py.File(path, "w") as f:
        n = images.shape[0]
        f.create_dataset("images", data=images, chunks=(max(1, min(n, 8)),) + images.shape[1:])
        f.create_dataset("labels", data=labels)
        h, w, c = images.shape[1:]
        a = dict(format="hpctrain-dataset", version=1, split=split, shard_index=index, num_shards=num,
                 num_classes=num_classes, height=h, width=w, channels=c,
                 class_names=[f"c{k}" for k in range(num_classes)],
                 mean=np.full(c, 0.5, np.float32), std=np.full(c, 0.25, np.float32), source="test")
        a.update(attrs or {})
        for k, v in a.items():
            f.attrs[k] = v


def finish():
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed", flush=True)
        sys.exit(1)
    print("all checks passed", flush=True)
    sys.exit(0)
