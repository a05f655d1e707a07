"""scripts/scaling_study.py: the plots and the cost table."""
import csv
import math
import os

import numpy as np

from scaling_study_model import fabric_for, spot_wall_factor
from scaling_study_results import measured_fabric


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
