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
import os
import sys

# The scaling_study_*.py modules beside this file (also when it is loaded by path, as the tests do).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scaling_study_model import (  # noqa: F401
    DEFAULT_SYSTEMS, PRESETS, SYSTEMS, allreduce_s, checkpoint_interval_s, efficiency, exposed_comm_s,
    fabric_for, ring_allreduce_s, spot_wall_factor, tree_allreduce_s, uniform_timeline)
from scaling_study_results import (
    Model, compute_ms, gpu_counts, load_results, measured_fabric, per_rank_batch)
from scaling_study_output import cost, plot


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


if __name__ == "__main__":
    sys.exit(main())
