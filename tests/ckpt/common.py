"""Helpers for the checkpoint script tests: run hpctrain (plain or under mpirun), read metrics.jsonl
and checkpoint files (with h5py, independently of our C++ reader), compare runs bitwise."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np

HT = os.environ.get("HT_BIN", "build/hpctrain")
MPIEXEC = os.environ.get("HT_MPIEXEC", "mpirun")
FAILURES = []
TMP = tempfile.mkdtemp(prefix="ht_ckpt_test_")


def check(cond, what):
    print(("ok:   " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        FAILURES.append(what)
    return cond


def faults(**kv):
    """The environment that injects test faults (base/test_faults.hpp), e.g.
    faults(signal_at_step=6, signal_rank=1) -> {"HT_TEST_FAULTS": "signal_at_step=6;signal_rank=1"}."""
    return {"HT_TEST_FAULTS": ";".join(f"{k}={v}" for k, v in kv.items())}


def cmd(args, np_ranks=None):
    c = [HT, "train"] + args
    if np_ranks:
        c = [MPIEXEC, "--oversubscribe", "--bind-to", "none", "-np", str(np_ranks)] + c
    return c


def run(args, np_ranks=None, timeout=120, env=None):
    """Runs to completion: (exit code, stdout + stderr)."""
    e = dict(os.environ, **(env or {}))
    try:
        p = subprocess.run(cmd(args, np_ranks), capture_output=True, text=True, timeout=timeout, env=e)
    except subprocess.TimeoutExpired as ex:
        return 124, "TIMEOUT (hang)\n" + str(ex.stdout) + str(ex.stderr)
    return p.returncode, p.stdout + p.stderr


def start(args, np_ranks=None, env=None):
    e = dict(os.environ, **(env or {}))
    return subprocess.Popen(cmd(args, np_ranks), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=e,
                            start_new_session=True)


def metric_events(run_dir):
    """Every record of RUN_DIR/metrics.jsonl in order ([] without the file), skipping lines cut by SIGKILL."""
    out = []
    p = os.path.join(run_dir, "metrics.jsonl")
    if os.path.exists(p):
        with open(p) as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass  # a line cut by SIGKILL
    return out


def metrics(run_dir, event="step"):
    return [j for j in metric_events(run_dir) if j.get("event") == event]


def losses(run_dir):
    """step -> loss of the LAST record of each step (a rerun after a crash repeats steps)."""
    return {j["step"]: j["loss"] for j in metrics(run_dir)}


def lrs(run_dir):
    return {j["step"]: j["lr"] for j in metrics(run_dir)}


def wait_for_step(run_dir, step, proc, timeout=60):
    """Waits until the run started after this call (a new run_start) logs `step`."""
    starts = len(metrics(run_dir, "run_start"))
    t0 = time.time()
    while time.time() - t0 < timeout:
        lines = metric_events(run_dir)
        seen = 0
        for j in lines:
            if j.get("event") == "run_start":
                seen += 1
            elif j.get("event") == "step" and seen > starts and j["step"] >= step:
                return True
        if proc.poll() is not None:
            return False
        time.sleep(0.01)
    return False


def latest(run_dir):
    with open(os.path.join(run_dir, "LATEST")) as f:
        return os.path.join(run_dir, f.read().strip())


def ckpt(run_dir, step):
    return os.path.join(run_dir, "checkpoints", "step-%08d.h5" % step)


def state(path, groups=("param", "momentum", "buffer")):
    out = {}
    with h5py.File(path, "r") as f:
        for g in groups:
            if g in f:
                f[g].visititems(lambda n, o: out.__setitem__(g + "/" + n, o[...]) if isinstance(o, h5py.Dataset) else None)
        ints = {k: int(f["ints"][k][0]) for k in f["ints"]}
    return out, ints


def datasets(path):
    """Every dataset of a checkpoint file by path (param/..., buffer/..., rank_buffer/..., momentum/...,
    meta/..., ints/..., floats/..., strings/...) as numpy arrays, plus the root attributes as "@<name>"."""
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda n, o: out.__setitem__(n, o[...]) if isinstance(o, h5py.Dataset) else None)
        for k, v in f.attrs.items():
            out["@" + k] = np.asarray(v)
    return out


# Datasets that hold the config text: they name run.dir and any extra command-line key, so they differ
# between runs made in different directories even when the training state is the same.
CONFIG_TEXT = ("strings/config", "strings/config_hash")


def same_state(a_path, b_path, ignore=CONFIG_TEXT):
    """Every dataset of the two checkpoints bitwise equal (same names, dtypes, shapes, bytes: tensors,
    per-rank buffers, progress counters, metadata), except the datasets in `ignore`. No tolerance:
    resume at the same world size is exact for every tensor, BatchNorm running statistics included."""
    a, b = datasets(a_path), datasets(b_path)
    if a.keys() != b.keys():
        return False, f"different datasets: {sorted(set(a) ^ set(b))[:6]}"
    n = 0
    for k in sorted(a):
        if k in ignore:
            continue
        x, y = a[k], b[k]
        if x.dtype != y.dtype or x.shape != y.shape or x.tobytes() != y.tobytes():
            d = ""
            if x.dtype == y.dtype and x.shape == y.shape and x.dtype.kind == "f":
                d = f" (max |d| {np.abs(x.astype(np.float64) - y.astype(np.float64)).max():.3g})"
            return False, f"{k} differs{d}"
        n += 1
    return True, f"{n} datasets bitwise equal" + (f", {len(ignore)} config-text datasets not compared" if ignore else "")


def to_version1(path):
    """Rewrites a checkpoint as format version 1 wrote it: no /rank_buffer group, the tensor index
    without it, root attribute version = 1 (a checkpoint of an earlier hpctrain)."""
    with h5py.File(path, "r+") as f:
        if "rank_buffer" in f:
            del f["rank_buffer"]
        names = [n for n in bytes(f["meta/tensor_names"][()]).decode().split("\n") if n and not n.startswith("rank_buffer/")]
        del f["meta/tensor_names"]
        f.create_dataset("meta/tensor_names", data=np.frombuffer("".join(n + "\n" for n in names).encode(), dtype=np.uint8),
                         chunks=True, fletcher32=True)
        f.attrs["version"] = np.int64(1)


def fresh_dir(name):
    d = os.path.join(TMP, name)
    shutil.rmtree(d, ignore_errors=True)
    return d


def finish():
    shutil.rmtree(TMP, ignore_errors=True)
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed:", *FAILURES, sep="\n  ", flush=True)
        sys.exit(1)
    print("all checks passed", flush=True)
    sys.exit(0)
