"""scripts/scaling_study.py: reading the bench results (train and allreduce JSON) and the
prediction model fitted to them."""
import glob
import json
import os
import re

import numpy as np

from scaling_study_model import allreduce_s, exposed_comm_s, uniform_timeline


# ---------------------------------------------------------------------------------------------
# Reading results

def load_results(paths):
    """All bench JSON files under the given folders/files: (train points, allreduce runs)."""
    files = []
    for p in paths:
        if os.path.isdir(p):
            files += sorted(glob.glob(os.path.join(p, "**", "*.json"), recursive=True))
        elif os.path.isfile(p):
            files.append(p)
    train, allreduce = [], []
    for f in files:
        try:
            with open(f) as fh:
                j = json.load(fh)
        except (OSError, ValueError):
            continue
        if not isinstance(j, dict):
            continue
        if j.get("benchmark") == "train":
            m = re.search(r"train-(weak|strong)-n(\d+)\.json$", f)
            j["scaling"] = j.get("scaling") or (m.group(1) if m else "unknown")
            j["file"] = f
            train.append(j)
        elif j.get("benchmark") == "allreduce":
            j["file"] = f
            allreduce.append(j)
    return train, allreduce


def compute_ms(p):
    return sum(float(p.get(k, 0.0)) for k in ("data_ms", "forward_ms", "backward_ms", "optimizer_ms"))


def per_rank_batch(p):
    return float(p["global_batch"]) / float(p["world_size"])


def fit_compute(train):
    """compute_ms(b) = a + c*b from measured points at the smallest world size (per-rank batch b)."""
    n0 = min(p["world_size"] for p in train)
    pts = {}
    for p in train:
        if p["world_size"] == n0:
            pts.setdefault(per_rank_batch(p), []).append(compute_ms(p))
    bs = sorted(pts)
    ys = [float(np.mean(pts[b])) for b in bs]
    if len(bs) >= 2:
        # Measured values at measured batches, linear between them, proportional beyond.
        def f(b):
            if b <= bs[0]:
                return ys[0] * b / bs[0]
            if b >= bs[-1]:
                return ys[-1] * b / bs[-1]
            return float(np.interp(b, bs, ys))
        return f, "interpolated between per-rank batches %s (%s ms) at %d rank(s), proportional beyond" % (
            [int(b) for b in bs], ", ".join("%.1f" % y for y in ys), n0)
    b0, y0 = bs[-1], ys[-1]
    return lambda b: y0 * b / b0, "proportional to per-rank batch from %.1f ms at %g per rank" % (y0, b0)


def measured_fabric(allreduce, n):
    """Fabric fitted to a measured allreduce run with n ranks (or the largest below n): busbw of
    the largest message, latency from the smallest message's time / (2(n-1))."""
    runs = [a for a in allreduce if a.get("world_size", 0) >= 2]
    if not runs:
        return None
    below = [a for a in runs if a["world_size"] <= n] or runs
    a = max(below, key=lambda r: r["world_size"])
    rows = [r for r in a.get("results", []) if r.get("path", "allreduce_sum") != "bucketer"]
    if not rows:
        return None
    big = max(rows, key=lambda r: r["bytes"])
    small = min(rows, key=lambda r: r["bytes"])
    w = a["world_size"]
    lat_us = small["time_us"] / (2.0 * (w - 1))
    return {"busbw_GBps": float(big["busbw_GBps"]), "latency_us": lat_us,
            "what": "measured: %d ranks, %.3g GB/s busbw at %d B, %.1f us latency" % (
                w, big["busbw_GBps"], big["bytes"], lat_us)}


# ---------------------------------------------------------------------------------------------
# Prediction

class Model:
    def __init__(self, train, args):
        self.args = args
        ref_n = min(p["world_size"] for p in train)
        ref = [p for p in train if p["world_size"] == ref_n]
        self.ref = ref[0]
        self.params = int(self.ref.get("parameters", 0)) or args.parameters
        if not self.params:
            raise SystemExit("scaling_study: no 'parameters' in the bench JSON; give --parameters")
        # Gradient bytes on the wire: 2 per parameter with dist.grad_dtype = bf16, else 4.
        self.grad_dtype = args.grad_dtype or self.ref.get("grad_dtype", "fp32")
        self.grad_bytes = args.grad_bytes if args.grad_bytes else (2 if self.grad_dtype == "bf16" else 4) * self.params
        self.compute, self.compute_note = fit_compute(train)
        self.fwd_frac = float(np.mean([p["forward_ms"] / max(compute_ms(p), 1e-9) for p in ref]))
        self.bwd_frac = float(np.mean([p["backward_ms"] / max(compute_ms(p), 1e-9) for p in ref]))
        # One rank has no buckets: the timeline comes from the smallest multi-rank point with one,
        # as fractions of that point's compute time.
        with_tl = sorted((p for p in train if p.get("bucket_launch_ms") and p.get("bucket_bytes")),
                         key=lambda p: p["world_size"])
        if with_tl:
            p = with_tl[0]
            c = compute_ms(p)
            self.timeline = ([float(t) / c for t in p["bucket_launch_ms"]], [float(b) for b in p["bucket_bytes"]])
            self.overlap_note = "measured bucket timeline (%d buckets, %d ranks, %s)" % (
                len(p["bucket_launch_ms"]), p["world_size"], os.path.basename(p["file"]))
        else:
            self.timeline = None
            self.overlap_note = "uniform gradient readiness over backward (no measured bucket timeline)"
        if args.overlap is not None:
            self.overlap_note = "fixed overlap fraction %.2f (--overlap)" % args.overlap

    def comm(self, n, comp, fwd, bwd, fabric):
        """(total allreduce s, exposed s) for n ranks with this step's compute, forward and backward."""
        if n <= 1:
            return 0.0, 0.0
        if self.timeline:
            fracs, sizes = self.timeline
            launches = [f * comp for f in fracs]
        else:
            sizes, launches = uniform_timeline(self.grad_bytes, self.args.bucket_mb * 2**20, fwd, bwd)
        comms = [allreduce_s(s, n, fabric, self.args.algo) for s in sizes]
        total = sum(comms)
        if self.args.overlap is not None:
            return total, (1 - self.args.overlap) * total
        return total, exposed_comm_s(launches, comms, fwd + bwd)

    def step(self, n, per_gpu_batch, fabric):
        """Predicted (step_s, compute_s, comm_s, exposed_s) for n GPUs at per_gpu_batch."""
        comp = self.compute(per_gpu_batch) / 1000.0
        total, exposed = self.comm(n, comp, comp * self.fwd_frac, comp * self.bwd_frac, fabric)
        return comp + exposed, comp, total, exposed


def gpu_counts(max_gpus):
    out, k = [], 1
    while k <= max_gpus:
        out.append(k)
        k *= 2
    return out
