#!/usr/bin/python3
"""hpctrain report RUN_DIR [RUN_DIR...] [--out DIR] [--price-per-gpu-hour X] [--spot-price-per-gpu-hour Y]

Reads RUN_DIR/metrics.jsonl (docs/metrics.md) and writes, into --out (default RUN_DIR/report, or
./report-compare for several run directories):
  report.md           the summary a person reads: time, throughput, restarts, accuracy, cost, verdict
  summary.json        the same figures for scripts
  loss_lr.png         training loss (per step, faint, and a centred mean; log axis with labelled ticks)
                      and learning rate per step
  eval.png            test loss and top-1 per epoch, on axes of a minimum span (a 0.0007 change stays small)
  throughput.png      images/s over the run's time
  step_breakdown.png  where the step time goes (data, forward, backward, exposed allreduce, optimizer,
                      checkpoint, other)
  gpu.png             GPU utilisation, memory, temperature and power (only when metrics.jsonl has NVML fields)
Several run directories overlay their curves, one label each, on images seen (step x global batch;
steps when a global batch is unknown), never on epochs; a note says when their test sets differ. A
run still being written (a cut last line) and a run preempted and resumed any number of times are
read as they are: a step repeated after a resume from an older checkpoint counts once, its last
occurrence wins. See docs/report.md.

Python: Debian's /usr/bin/python3 with python3-matplotlib (scripts/install_deps.sh). `hpctrain report`
runs this file (src/cli/cmd_report.cpp). Exit codes (docs/exit_codes.md): 0 written, 2 a RUN_DIR that
is missing or holds no readable metrics.jsonl, or bad options, 1 matplotlib missing or output unwritable.
"""
import argparse
import json
import math
import os
import sys

# The report_*.py modules beside this file (also when it is loaded by path, as the tests do).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report_events import EXIT_OK, EXIT_RUNTIME, ReportError  # noqa: F401
from report_run import Run
from report_verdict import verdict_word
from report_text import comparison, fmt, markdown, money
from report_plots import plots, smooth_half_width  # noqa: F401


# ---- main ------------------------------------------------------------------------------------------

def labels_for(dirs):
    base = [os.path.basename(os.path.normpath(d)) or d for d in dirs]
    out = []
    for d, b in zip(dirs, base):
        if base.count(b) > 1:
            p = os.path.normpath(d).split(os.sep)
            b = os.sep.join(p[-2:])
        out.append(b)
    return out


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="hpctrain report", description=(
        "Plots and a Markdown summary of one or more run directories (RUN_DIR/metrics.jsonl): losses, "
        "learning rate, test accuracy, throughput, step-time breakdown, GPU figures, restarts, cost and a "
        "verdict. Several RUN_DIRs overlay their curves. See docs/report.md."))
    ap.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directory (run.dir) holding metrics.jsonl")
    ap.add_argument("--out", metavar="DIR", help="where to write report.md, summary.json and the PNGs "
                    "(default: RUN_DIR/report; ./report-compare for several RUN_DIRs)")
    ap.add_argument("--price-per-gpu-hour", type=float, metavar="X",
                    help="on-demand price of one GPU (a rank on a CPU run) for one hour (default: run.price_per_gpu_hour of the run's config, if any)")
    ap.add_argument("--spot-price-per-gpu-hour", type=float, metavar="Y", help="spot (preemptible) price of one GPU-hour")
    a = ap.parse_args(argv)
    for k in ("price_per_gpu_hour", "spot_price_per_gpu_hour"):
        v = getattr(a, k)
        if v is not None and (not math.isfinite(v) or v < 0):
            ap.error(f"--{k.replace('_', '-')} {v}: must be a finite number >= 0")
    return a


def main(argv):
    a = parse_args(argv)
    labels = labels_for(a.run_dirs)
    runs = [Run(d, l) for d, l in zip(a.run_dirs, labels)]
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ReportError(f"matplotlib is not available to {sys.executable} ({e}): install Debian's python3-matplotlib "
                          "(scripts/install_deps.sh), or set HT_PYTHON to a python3 that has it", EXIT_RUNTIME)
    out = a.out or (os.path.join(a.run_dirs[0], "report") if len(runs) == 1 else "report-compare")
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        raise ReportError(f"--out {out}: cannot create the directory: {e.strerror}", EXIT_RUNTIME)
    summaries = [r.summary(a.price_per_gpu_hour, a.spot_price_per_gpu_hour) for r in runs]
    try:
        comp = comparison(runs)
        facts = {}
        pngs = plots(runs, out, plt, comp, facts)
        text = markdown(runs, summaries, pngs, comp)
        with open(os.path.join(out, "report.md"), "w") as f:
            f.write(text + "\n")
        with open(os.path.join(out, "summary.json"), "w") as f:
            json.dump({"runs": summaries, "comparison": comp, "plots": facts,
                       "files": ["report.md", "summary.json"] + [p for p, _ in pngs]}, f, indent=1, default=str)
            f.write("\n")
    except OSError as e:
        raise ReportError(f"--out {out}: cannot write: {e}", EXIT_RUNTIME)
    for S in summaries:
        v = S["verdict"]
        head = v["problems"][0] if v["problems"] else v["remarks"][0] if v["healthy"] is None else "no problem found"
        print(f"{S['label']}: {verdict_word(v) if v['healthy'] is not False else 'NOT healthy'}: {head}")
        print(f"  {S['steps']} steps, {S['restarts']} restart(s), final top-1 {fmt(S['final_top1'])}, best {fmt(S['best_top1'])}, "
              f"{fmt(S['images_per_s'], ',.0f')} images/s, {S['device_hours']:.4f} {S['device_unit']}"
              + (f", cost {money(S['cost'])}" if S["cost"] is not None else ""))
    print(f"report: {os.path.join(out, 'report.md')} ({', '.join(p for p, _ in pngs)})")
    return EXIT_OK


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except ReportError as e:
        print(f"hpctrain: error: report: {e}", file=sys.stderr)
        sys.exit(e.code)
    except BrokenPipeError:
        sys.exit(EXIT_RUNTIME)
