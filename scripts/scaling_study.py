#!/usr/bin/python3
"""Scaling study: measured throughput and efficiency against GPU (rank) count, extended by a model.

Reads result folders (recursively): `hpctrain bench train` JSON ("benchmark": "train"; weak or strong
from the file name train-weak-n<k>.json / train-strong-n<k>.json as slurm/bench_node.sbatch writes
them, or a "scaling" field) and `hpctrain bench allreduce` JSON ("benchmark": "allreduce").
Writes to --out:
  scaling.csv      measured points and model predictions (one row each)
  throughput.png   images/s against GPUs, weak and strong, measured points and model curves
  efficiency.png   scaling efficiency against GPUs
  breakdown.png    step-time breakdown (data, forward, backward, exposed allreduce, optimizer)
  cost.csv / cost.txt  GPU-hours and cost per epoch and per run, on-demand vs spot
and prints the tables.

Model (all times per optimizer step):
  compute(b)     measured data+forward+backward+optimizer at the smallest measured rank count,
                 at per-GPU batch b: the measured value, linear between measured batches,
                 proportional to b beyond them
  allreduce      ring: 2(n-1)/n * S / busbw + 2(n-1) * latency
                 tree: 2 * S / busbw + 2 * ceil(log2 n) * latency   (pipelined reduce + broadcast)
                 S = gradient bytes (4 x parameters; 2 x with dist.grad_dtype = bf16), busbw and latency of the slowest level the
                 job spans: the node fabric up to gpus-per-node GPUs, the network beyond; 'best'
                 takes the faster of ring and tree, per message
  overlap        gradients are averaged in buckets (dist.bucket_mb) launched during backward; the
                 buckets' launch times come from the measured bucket timeline when the bench JSON
                 has one ("bucket_launch_ms", "bucket_bytes"), else readiness is taken as uniform
                 over backward. Buckets run one after another on the fabric; the step waits for
                 the part that ends after backward: exposed = max(0, end of last bucket - end of backward)
  step           compute + exposed allreduce; images/s = global batch / step
  efficiency     weak: images/s(n) / (n images/s(1)) with the per-GPU batch fixed;
                 strong: the same ratio with the global batch fixed
Cost: epoch time = samples per epoch / images/s; GPU-hours = n x hours; cost = GPU-hours x price.
  Spot: price x (1 - discount), preemptions at `rate` per node-hour (a job on N nodes is hit at
  N x rate), each costing the restart time plus the work since the last checkpoint; checkpoints
  every tau = sqrt(2 delta M) - delta (checkpoint_interval_s: Daly's first-order optimum; Young's
  sqrt(2 delta M) once delta >= M/2), with delta the checkpoint write time and M = 1/(job preemption
  rate):
  wall = work x (1 + delta/tau) / (1 - (tau/2 + delta/2 + restart)/M).
Precision: one study per train.precision (the bench JSON's "precision", fp32 when absent);
  --precision picks it when the folders hold several (otherwise exit 2).
Python: /usr/bin/python3 with Debian's numpy and matplotlib (Agg backend).
"""
import argparse
import csv
import glob
import json
import math
import os
import re
import sys

import numpy as np

# Fabric presets: bus bandwidth (GB/s, as nccl-tests' busbw) and per-step latency (us).
# Node fabrics: NCCL all_reduce_perf busbw on 8-GPU NVSwitch nodes, large messages.
# Networks: per node, rails x link rate x efficiency (NCCL over IB reaches about 90% of line rate
# with one NIC per GPU).
PRESETS = {
    "nvswitch-a100": {"busbw_GBps": 230.0, "latency_us": 8.0,
                      "what": "8x A100 SXM, NVLink3/NVSwitch (600 GB/s per GPU)"},
    "nvswitch-h100": {"busbw_GBps": 450.0, "latency_us": 8.0,
                      "what": "8x H100 SXM, NVLink4/NVSwitch (900 GB/s per GPU)"},
    "ib-200": {"busbw_GBps": 8 * 25.0 * 0.9, "latency_us": 20.0,
               "what": "8 rails x 200 Gb/s InfiniBand HDR per node"},
    "ib-400": {"busbw_GBps": 8 * 50.0 * 0.9, "latency_us": 15.0,
               "what": "8 rails x 400 Gb/s InfiniBand NDR per node"},
    # CPU clusters (ranks instead of GPUs): MPI over shared memory in a node, one NIC per node.
    "shm": {"busbw_GBps": 10.0, "latency_us": 2.0, "what": "MPI over shared memory within a node"},
    "ib-200x1": {"busbw_GBps": 25.0 * 0.9, "latency_us": 3.0, "what": "1 x 200 Gb/s InfiniBand per node (MPI)"},
    "eth-25": {"busbw_GBps": 3.125 * 0.9, "latency_us": 30.0, "what": "1 x 25 Gb/s Ethernet per node (MPI over TCP)"},
}
# Default systems: (node fabric, network). GPU systems for GPU measurements, CPU ones for CPU.
SYSTEMS = {
    "a100-ib200": ("nvswitch-a100", "ib-200"),
    "h100-ib400": ("nvswitch-h100", "ib-400"),
    "cpu-ib200": ("shm", "ib-200x1"),
    "cpu-eth25": ("shm", "eth-25"),
}
DEFAULT_SYSTEMS = {"cuda": ["a100-ib200", "h100-ib400"], "cpu": ["cpu-ib200", "cpu-eth25"]}


# ---------------------------------------------------------------------------------------------
# Model arithmetic (unit-tested in tests/slurm/test_scaling_model.py with hand-computed values)

def ring_allreduce_s(nbytes, n, busbw_Bps, latency_s):
    """Ring allreduce time: 2(n-1)/n * bytes / busbw + 2(n-1) * latency; 0 for one rank."""
    if n <= 1:
        return 0.0
    return 2.0 * (n - 1) / n * nbytes / busbw_Bps + 2.0 * (n - 1) * latency_s


def tree_allreduce_s(nbytes, n, busbw_Bps, latency_s):
    """Pipelined tree allreduce (reduce then broadcast): 2 * bytes / busbw + 2 ceil(log2 n) latency."""
    if n <= 1:
        return 0.0
    return 2.0 * nbytes / busbw_Bps + 2.0 * math.ceil(math.log2(n)) * latency_s


def allreduce_s(nbytes, n, fabric, algo="best"):
    """Allreduce time for `n` ranks on `fabric` (dict busbw_GBps, latency_us); algo ring|tree|best."""
    bw = fabric["busbw_GBps"] * 1e9
    lat = fabric["latency_us"] * 1e-6
    ring = ring_allreduce_s(nbytes, n, bw, lat)
    tree = tree_allreduce_s(nbytes, n, bw, lat)
    if algo == "ring":
        return ring
    if algo == "tree":
        return tree
    return min(ring, tree)


def fabric_for(n, gpus_per_node, node_fabric, network):
    """The slowest level an n-rank job spans: the node fabric within one node, else the network."""
    if n <= gpus_per_node:
        return node_fabric
    # Beyond one node the ring/tree crosses the network; the node fabric is faster and hidden.
    return {"busbw_GBps": min(node_fabric["busbw_GBps"], network["busbw_GBps"]),
            "latency_us": max(node_fabric["latency_us"], network["latency_us"])}


def exposed_comm_s(launch_s, comm_s, backward_end_s):
    """Buckets launched at launch_s[i] (in order), each taking comm_s[i] on one shared fabric:
    bucket i starts at max(launch_s[i], end of bucket i-1). Returns the time past backward_end_s
    the step waits (0 when communication is fully hidden)."""
    end = 0.0
    for t, c in zip(launch_s, comm_s):
        end = max(end, t) + c
    return max(0.0, end - backward_end_s)


def uniform_timeline(total_bytes, bucket_bytes, forward_s, backward_s):
    """Bucket sizes and launch times when no timeline was measured: buckets of bucket_bytes (the
    last one smaller), each launched when backward has produced its share of the gradients."""
    sizes = []
    left = total_bytes
    while left > 0:
        sizes.append(min(bucket_bytes, left))
        left -= sizes[-1]
    launches, done = [], 0.0
    for s in sizes:
        done += s
        launches.append(forward_s + backward_s * done / total_bytes)
    return sizes, launches


def checkpoint_interval_s(delta_s, mtbf_s):
    """Daly's first-order optimum checkpoint interval sqrt(2 delta M) - delta (Young's sqrt(2 delta M)
    once delta >= M/2, past which Daly's first-order form falls again, to 0 at delta = 2 M). Daly rather
    than Young: Young's derivation leaves out the time spent writing the checkpoint itself. The same
    formula and name as checkpoint_interval_s in src/train/checkpoint_schedule.hpp (training's
    checkpoint.mtbf_minutes)."""
    young = math.sqrt(2.0 * delta_s * mtbf_s)
    return young - delta_s if delta_s < mtbf_s / 2 else young


def spot_wall_factor(delta_s, mtbf_s, restart_s):
    """Wall time / useful work time under preemption: (1 + delta/tau) / (1 - (tau/2 + delta/2 + restart)/M).
    Returns (factor, tau). inf when preemptions come faster than work can progress."""
    if not math.isfinite(mtbf_s):
        return 1.0, math.inf
    tau = checkpoint_interval_s(delta_s, mtbf_s)
    lost = (tau / 2 + delta_s / 2 + restart_s) / mtbf_s
    if lost >= 1:
        return math.inf, tau
    return (1 + delta_s / tau) / (1 - lost), tau


def efficiency(throughput_n, n, throughput_1):
    """Scaling efficiency: throughput(n) / (n * throughput(1))."""
    return throughput_n / (n * throughput_1)


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


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("folders", nargs="+", help="result folders or JSON files")
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--system", action="append", default=None,
                    help="model system NAME=NODE_FABRIC,NETWORK (presets: %s; systems: %s; "
                         "'measured' for the allreduce results); repeatable" % (
                             ", ".join(PRESETS), ", ".join(SYSTEMS)))
    ap.add_argument("--fabric", action="append", default=[],
                    help="define or override a fabric: NAME=BUSBW_GBps,LATENCY_us (repeatable)")
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--max-gpus", type=int, default=1024)
    ap.add_argument("--algo", choices=["ring", "tree", "best"], default="best")
    ap.add_argument("--bucket-mb", type=float, default=25.0, help="dist.bucket_mb (uniform timeline)")
    ap.add_argument("--overlap", type=float, default=None,
                    help="fixed fraction of allreduce hidden behind backward (overrides the timeline)")
    ap.add_argument("--parameters", type=int, default=0, help="model parameters if the JSON lacks them")
    ap.add_argument("--grad-bytes", type=float, default=0,
                    help="gradient bytes per step (default 4 x parameters, 2 x with a bf16 wire)")
    ap.add_argument("--precision", choices=["fp32", "tf32", "bf16", "fp16"], default=None,
                    help="use the bench train points of this train.precision (needed when the folders mix several)")
    ap.add_argument("--grad-dtype", choices=["fp32", "bf16"], default=None,
                    help="dist.grad_dtype of the modelled exchange (default: the points' own, else fp32)")
    ap.add_argument("--weak-batch", type=float, default=None, help="per-GPU batch for weak predictions")
    ap.add_argument("--strong-batch", type=float, default=None, help="global batch for strong predictions")
    ap.add_argument("--price", type=float, default=3.00, help="on-demand price per GPU-hour")
    ap.add_argument("--currency", default="USD")
    ap.add_argument("--spot-discount", type=float, default=0.60, help="spot price = price x (1 - discount)")
    ap.add_argument("--preempt-per-node-hour", type=float, default=0.05,
                    help="spot preemptions per node-hour")
    ap.add_argument("--checkpoint-s", type=float, default=30.0, help="checkpoint write time (delta)")
    ap.add_argument("--restart-s", type=float, default=180.0, help="requeue + start + load time per preemption")
    ap.add_argument("--epoch-samples", type=float, default=None,
                    help="samples per epoch (default: ImageNet's 1,281,167 for resnet*, 60,000 otherwise)")
    ap.add_argument("--epochs", type=float, default=None, help="epochs per run (default 90 resnet*, 10 otherwise)")
    ap.add_argument("--cost-gpus", default="8,64,256,1024", help="GPU counts in the cost table")
    args = ap.parse_args(argv)

    train, allreduce = load_results(args.folders)
    if not train:
        print("scaling_study: no bench train results under %s" % " ".join(args.folders), file=sys.stderr)
        return 2
    # One precision per study: points of several would mix different compute times.
    precisions = sorted({p.get("precision", "fp32") for p in train})
    if args.precision:
        train = [p for p in train if p.get("precision", "fp32") == args.precision]
        if not train:
            print("scaling_study: no bench train results with precision %s (found: %s)" % (
                args.precision, ", ".join(precisions)), file=sys.stderr)
            return 2
    elif len(precisions) > 1:
        print("scaling_study: the results mix precisions %s: pass --precision" % ", ".join(precisions), file=sys.stderr)
        return 2
    precision = args.precision or precisions[0]
    os.makedirs(args.out, exist_ok=True)

    fabrics = {k: dict(v) for k, v in PRESETS.items()}
    for spec in args.fabric:
        name, _, vals = spec.partition("=")
        bw, lat = (float(x) for x in vals.split(","))
        fabrics[name] = {"busbw_GBps": bw, "latency_us": lat, "what": "given: --fabric %s" % spec}
    systems = {}
    dev = train[0].get("device", "cpu")
    for spec in args.system or (DEFAULT_SYSTEMS.get(dev, DEFAULT_SYSTEMS["cpu"]) + (["measured"] if allreduce else [])):
        name, _, val = spec.partition("=")
        if name == "measured" and not val:
            systems["measured"] = ("measured", "measured")
        elif val:
            systems[name] = tuple(val.split(","))
        elif name in SYSTEMS:
            systems[name] = SYSTEMS[name]
        else:
            raise SystemExit("scaling_study: unknown system '%s'" % name)

    model = Model(train, args)
    model_name = model.ref.get("model", "?")
    device = model.ref.get("device", "?")
    measured_max = max(p["world_size"] for p in train)

    # ---- measured points; comm_model_ms: the model's exposed allreduce for that point's measured
    # compute on the measured fabric (a check of the communication model where both exist)
    def check_ms(p):
        fab = measured_fabric(allreduce, p["world_size"]) if p["world_size"] > 1 else None
        if fab is None:
            return ""
        _, exp = model.comm(p["world_size"], compute_ms(p) / 1e3, p["forward_ms"] / 1e3, p["backward_ms"] / 1e3, fab)
        return exp * 1e3

    rows = []
    base = {}
    for mode in ("weak", "strong", "unknown"):
        pts = sorted((p for p in train if p["scaling"] == mode), key=lambda p: p["world_size"])
        if not pts:
            continue
        one = [p for p in pts if p["world_size"] == pts[0]["world_size"]][0]
        base[mode] = one
        for p in pts:
            n = p["world_size"]
            x1 = one["images_per_s"] * (n / one["world_size"]) if mode == "weak" else one["images_per_s"] * n / one["world_size"]
            rows.append({
                "kind": "measured", "scaling": mode, "system": device, "gpus": n,
                "global_batch": p["global_batch"], "per_gpu_batch": per_rank_batch(p),
                "images_per_s": p["images_per_s"], "images_per_s_per_gpu": p["images_per_s"] / n,
                "efficiency": p["images_per_s"] / x1,
                "step_ms": p["step_ms"], "compute_ms": compute_ms(p),
                "data_ms": p.get("data_ms", 0.0), "forward_ms": p.get("forward_ms", 0.0),
                "backward_ms": p.get("backward_ms", 0.0), "allreduce_ms": p.get("allreduce_ms", 0.0),
                "optimizer_ms": p.get("optimizer_ms", 0.0), "comm_model_ms": check_ms(p), "source": p["file"]})

    # ---- model predictions
    weak_b = args.weak_batch or (per_rank_batch(base["weak"]) if "weak" in base else per_rank_batch(model.ref))
    strong_g = args.strong_batch or (float(base["strong"]["global_batch"]) if "strong" in base
                                     else weak_b * args.max_gpus)
    counts = gpu_counts(args.max_gpus)
    curves = {}
    for sname, (nf, nw) in systems.items():
        for mode in ("weak", "strong"):
            xs, ys, effs = [], [], []
            t1 = None
            for n in counts:
                if nf == "measured":
                    fab = measured_fabric(allreduce, n)
                    if fab is None:
                        break
                else:
                    fab = fabric_for(n, args.gpus_per_node, fabrics[nf], fabrics[nw])
                b = weak_b if mode == "weak" else strong_g / n
                if b < 1:
                    break
                step, comp, comm, exp = model.step(n, b, fab)
                thr = b * n / step
                if t1 is None:
                    t1 = thr  # n = 1
                eff = efficiency(thr, n, t1)
                xs.append(n), ys.append(thr), effs.append(eff)
                rows.append({
                    "kind": "model", "scaling": mode, "system": sname, "gpus": n, "global_batch": b * n,
                    "per_gpu_batch": b, "images_per_s": thr, "images_per_s_per_gpu": thr / n,
                    "efficiency": eff, "step_ms": step * 1e3, "compute_ms": comp * 1e3, "data_ms": "",
                    "forward_ms": "", "backward_ms": "", "allreduce_ms": exp * 1e3, "optimizer_ms": "",
                    "comm_model_ms": comm * 1e3, "source": "model"})
            curves[(sname, mode)] = (xs, ys, effs)

    cols = ["kind", "scaling", "system", "gpus", "global_batch", "per_gpu_batch", "images_per_s",
            "images_per_s_per_gpu", "efficiency", "step_ms", "compute_ms", "data_ms", "forward_ms",
            "backward_ms", "allreduce_ms", "optimizer_ms", "comm_model_ms", "source"]
    with open(os.path.join(args.out, "scaling.csv"), "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols)
        w.writeheader()
        for r in rows:
            w.writerow({k: (("%.6g" % v) if isinstance(v, float) else v) for k, v in r.items()})

    print("scaling study: %s on %s, precision %s, %d parameters (%.1f MB of gradients in %s), measured 1..%d ranks" % (
        model_name, device, precision, model.params, model.grad_bytes / 1e6, model.grad_dtype, measured_max))
    print("  compute: %s" % model.compute_note)
    print("  overlap: %s; allreduce algorithm: %s" % (model.overlap_note, args.algo))
    for sname, (nf, nw) in systems.items():
        if nf == "measured":
            f = measured_fabric(allreduce, measured_max)
            print("  system %-12s %s" % (sname, f["what"] if f else "no allreduce results"))
        else:
            print("  system %-12s node %s (%.0f GB/s, %.0f us), network %s (%.0f GB/s, %.0f us)" % (
                sname, nf, fabrics[nf]["busbw_GBps"], fabrics[nf]["latency_us"], nw,
                fabrics[nw]["busbw_GBps"], fabrics[nw]["latency_us"]))
    print()
    print("comm ms: exposed allreduce per step (measured for measured points, predicted for the model);")
    print("model ms: the model's exposed allreduce for a measured point's own compute on the measured fabric")
    print("%-8s %-7s %-12s %6s %12s %10s %8s %9s %9s %9s" % (
        "kind", "scaling", "system", "gpus", "images/s", "per gpu", "eff", "step ms", "comm ms", "model ms"))
    for r in rows:
        if r["kind"] == "model" and r["gpus"] not in (1, 8, 64, 256, 1024):
            continue
        chk = r["comm_model_ms"] if r["kind"] == "measured" else ""
        print("%-8s %-7s %-12s %6d %12.1f %10.1f %8.3f %9.2f %9.2f %9s" % (
            r["kind"], r["scaling"], r["system"], r["gpus"], r["images_per_s"], r["images_per_s_per_gpu"],
            r["efficiency"], r["step_ms"], r["allreduce_ms"], ("%.2f" % chk) if chk != "" else ""))

    plot(args, rows, curves, model_name, device)
    cost(args, model, systems, fabrics, allreduce, weak_b, model_name)
    return 0


def plot(args, rows, curves, model_name, device):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = ["C0", "C1", "C2", "C3", "C4", "C5"]
    systems = sorted({s for s, _ in curves})
    for what, fname, ylabel in (("images_per_s", "throughput.png", "images/s"),
                                ("efficiency", "efficiency.png", "scaling efficiency")):
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
        for ax, mode in zip(axes, ("weak", "strong")):
            for i, s in enumerate(systems):
                xs, ys, effs = curves.get((s, mode), ([], [], []))
                if xs:
                    ax.plot(xs, ys if what == "images_per_s" else effs, "-", color=colors[i % 6],
                            label="model: %s" % s)
            m = [r for r in rows if r["kind"] == "measured" and r["scaling"] in (mode, "unknown")]
            if m:
                ax.plot([r["gpus"] for r in m], [r[what] for r in m], "ko", ms=7,
                        label="measured (%s)" % device)
            ax.set_xscale("log", base=2)
            if what == "images_per_s":
                ax.set_yscale("log")
            else:
                top = max([1.0] + [e for (s_, m_), (_, _, es) in curves.items() if m_ == mode for e in es])
                ax.set_ylim(0, min(2.0, 1.05 * top + 0.05))
            ax.set_xlabel("GPUs (ranks)")
            ax.set_ylabel(ylabel)
            ax.set_title("%s scaling, %s" % (mode, model_name))
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(args.out, fname), dpi=110)
        plt.close(fig)

    # Step-time breakdown: measured points (stacked parts) next to model points of the first system.
    m = [r for r in rows if r["kind"] == "measured"]
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(m) + 3), 4.8))
    parts = ["data_ms", "forward_ms", "backward_ms", "allreduce_ms", "optimizer_ms"]
    labels = ["%s n=%d" % (r["scaling"], r["gpus"]) for r in m]
    bottom = np.zeros(len(m))
    for i, p in enumerate(parts):
        v = np.array([float(r[p] or 0) for r in m])
        ax.bar(labels, v, bottom=bottom, color=colors[i % 6],
               label=p.replace("_ms", "") + (" (exposed)" if p == "allreduce_ms" else ""))
        bottom += v
    ax.set_ylabel("ms per step")
    ax.set_title("measured step-time breakdown, %s on %s" % (model_name, device))
    ax.legend(fontsize=8)
    plt.setp(ax.get_xticklabels(), rotation=30, ha="right")
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "breakdown.png"), dpi=110)
    plt.close(fig)


def cost(args, model, systems, fabrics, allreduce, weak_b, model_name):
    resnet = model_name.startswith("resnet")
    samples = args.epoch_samples or (1281167.0 if resnet else 60000.0)
    epochs = args.epochs or (90.0 if resnet else 10.0)
    counts = [int(x) for x in args.cost_gpus.split(",") if x]
    lines = []
    rows = []
    head = ("%-12s %6s %11s %9s %10s %10s %11s %10s %8s %9s %11s" % (
        "system", "gpus", "images/s", "epoch h", "GPU-h/ep", "cost/ep", "cost/run", "spot/run", "tau min",
        "spot wall", "spot GPU-h"))
    lines.append("cost per epoch (%.0f samples) and per run (%g epochs), weak scaling at %g per GPU; price %.2f %s "
                 "per GPU-hour on demand, spot %.0f%% off with %.3g preemptions per node-hour, checkpoint %.0f s, "
                 "restart %.0f s" % (samples, epochs, weak_b, args.price, args.currency, 100 * args.spot_discount,
                                     args.preempt_per_node_hour, args.checkpoint_s, args.restart_s))
    lines.append(head)
    for sname, (nf, nw) in systems.items():
        for n in counts:
            if n > args.max_gpus:
                continue
            fab = measured_fabric(allreduce, n) if nf == "measured" else \
                fabric_for(n, args.gpus_per_node, fabrics[nf], fabrics[nw])
            if fab is None:
                continue
            step, _, _, _ = model.step(n, weak_b, fab)
            thr = weak_b * n / step
            epoch_h = samples / thr / 3600.0
            gpu_h = epoch_h * n
            c_ep = gpu_h * args.price
            c_run = c_ep * epochs
            nodes = max(1, math.ceil(n / args.gpus_per_node))
            rate = nodes * args.preempt_per_node_hour / 3600.0
            mtbf = 1.0 / rate if rate > 0 else math.inf
            factor, tau = spot_wall_factor(args.checkpoint_s, mtbf, args.restart_s)
            spot_gpu_h = gpu_h * epochs * factor
            spot_run = spot_gpu_h * args.price * (1 - args.spot_discount)
            rows.append({"system": sname, "gpus": n, "images_per_s": thr, "epoch_hours": epoch_h,
                         "gpu_hours_per_epoch": gpu_h, "cost_per_epoch": c_ep, "cost_per_run": c_run,
                         "spot_tau_minutes": tau / 60, "spot_wall_factor": factor,
                         "spot_gpu_hours_per_run": spot_gpu_h, "spot_cost_per_run": spot_run,
                         "currency": args.currency})
            lines.append("%-12s %6d %11.1f %9.3f %10.2f %10.2f %11.2f %10.2f %8.1f %9.3f %11.1f" % (
                sname, n, thr, epoch_h, gpu_h, c_ep, c_run, spot_run, tau / 60, factor, spot_gpu_h))
    text = "\n".join(lines)
    print()
    print(text)
    with open(os.path.join(args.out, "cost.txt"), "w") as fh:
        fh.write(text + "\n")
    if rows:
        with open(os.path.join(args.out, "cost.csv"), "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            for r in rows:
                w.writerow({k: (("%.6g" % v) if isinstance(v, float) else v) for k, v in r.items()})


if __name__ == "__main__":
    sys.exit(main())
