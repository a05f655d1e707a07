"""What the plots of `hpctrain report` (scripts/report.py; docs/report.md#what-the-plots-show) show a
reader, checked on the drawn figures, without MPI or a training run: run directories are written
here by hand (metrics.jsonl, docs/metrics.md).
  - loss_lr.png: a log loss axis carries at least 3 labelled ticks inside the view (wide, usual and
    narrow loss ranges, and the real Fashion-MNIST run of results/report/); the raw loss is drawn
    thin and faint under a smoothed line (a centred mean) and the legend names both;
  - eval.png: the top-1 axis spans at least 0.05 inside [0, 1] and the test-loss axis at least 20%
    of its middle value, so a 0.0007 change in top-1 fills under 2% of the panel;
  - several runs overlay on images seen (step x global batch) when every global batch is known, else
    on steps, never on epochs: two runs of different epoch lengths and batches end at the same x;
  - runs evaluated on different test sets (eval `samples`, data.dir) get a note in report.md, in
    summary.json and on eval.png; runs on the same test set get none.
The figures are captured in-process (scripts/report.py imported, Figure.savefig wrapped) and the
same facts are read back from summary.json ("plots", "comparison"). Runs with the python that runs
it (Debian's /usr/bin/python3 with python3-matplotlib); exit 77 (skipped) without matplotlib.
HT_REPORT_TEST_KEEP=DIR keeps the reports (to look at the PNGs)."""
import atexit
import gzip
import importlib.util
import io
import json
import math
import os
import random
import shutil
import sys
import tempfile
from contextlib import redirect_stdout

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.environ.get("HT_REPORT_SCRIPT") or os.path.join(HERE, "..", "..", "scripts", "report.py")
SAMPLE = os.path.join(HERE, "..", "..", "results", "report", "metrics.jsonl.gz")
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.figure
    import numpy as np
except ImportError as e:
    print(f"skipped: matplotlib/numpy not available to {sys.executable} ({e})")
    sys.exit(77)

sys.path.insert(0, os.path.join(HERE, "..", "dataset"))
from common import FAILURES, check_logged as check  # noqa: E402  (every check printed, failures kept)

KEEP = os.environ.get("HT_REPORT_TEST_KEEP")
TMP = tempfile.mkdtemp(prefix="ht_report_plots_")
atexit.register(shutil.rmtree, TMP, True)


spec = importlib.util.spec_from_file_location("ht_report", SCRIPT)
report = importlib.util.module_from_spec(spec)
spec.loader.exec_module(report)

# ---- run directories written by hand ------------------------------------------------------------


def config_text(global_batch, data_dir="/data/fmnist", synthetic=False, seed=42):
    gb = "" if global_batch is None else f"global_batch = {global_batch}\n"
    return (f"[run]\nseed = {seed}\n\n[data]\ndir = {data_dir}\nsynthetic = {'true' if synthetic else 'false'}\n"
            f"synthetic_samples = 4096\nsynthetic_height = 32\nsynthetic_width = 32\nsynthetic_channels = 3\n"
            f"synthetic_classes = 10\n\n[model]\nname = fmnist_cnn\n\n[train]\n{gb}epochs = 3\n")


def write_run(name, *, steps_per_epoch=100, epochs=3, global_batch=128, loss=None, top1=(0.9101, 0.9105, 0.9108),
              test_loss=(0.3001, 0.3000, 0.2999), samples=10000, data_dir="/data/fmnist", config=True,
              images_per_s=True, seed=1):
    """A finished run of `epochs` epochs: per-step loss from loss(step, total) (default: 2.3 falling
    to ~0.15 with multiplicative noise), a cosine learning rate, one eval record per epoch."""
    rnd = random.Random(seed)
    total = steps_per_epoch * epochs
    loss = loss or (lambda s, n: (0.15 + 2.15 * math.exp(-s / (0.08 * n))) * math.exp(rnd.gauss(0.0, 0.25)))
    d = os.path.join(TMP, name)
    os.makedirs(d)
    t = 1.8e9
    ev = [{"event": "run_start", "time": t, "world_size": 2, "devices": "cpu", "steps_per_epoch": steps_per_epoch,
           "total_steps": total, "resumed_from_step": 0}]
    if config:
        ev[0]["config"] = config_text(global_batch, data_dir)
    for s in range(1, total + 1):
        t += 0.2
        e = {"event": "step", "step": s, "epoch": (s - 1) // steps_per_epoch + 1, "loss": loss(s, total),
             "lr": 0.05 * 0.5 * (1 + math.cos(math.pi * s / total)), "step_ms": 200.0, "data_ms": 1.0,
             "forward_ms": 80.0, "backward_ms": 90.0, "allreduce_ms": 10.0, "optimizer_ms": 2.0,
             "skipped": False, "time": t}
        if images_per_s and global_batch:
            e["images_per_s"] = global_batch / 0.2
        ev.append(e)
        if s % steps_per_epoch == 0 and s // steps_per_epoch <= len(top1):
            k = s // steps_per_epoch - 1
            t += 1.0
            ev.append({"event": "eval", "epoch": k + 1, "step": s, "loss": test_loss[k], "top1": top1[k],
                       "samples": samples, "eval_ms": 1000.0, "time": t})
    ev.append({"event": "run_end", "status": "finished", "exit_code": 0, "steps": total, "time": t + 0.1, "wall_s": t - 1.8e9})
    with open(os.path.join(d, "metrics.jsonl"), "w") as f:
        for e in ev:
            f.write(json.dumps(e) + "\n")
    return d


def run_report(dirs, out):
    """scripts/report.py in this process: (exit code, stdout, {png name: the matplotlib Figure saved})."""
    figs = {}
    orig = matplotlib.figure.Figure.savefig

    def keep(fig, fname, *a, **kw):
        figs[os.path.basename(str(fname))] = fig
        return orig(fig, fname, *a, **kw)
    matplotlib.figure.Figure.savefig = keep
    buf = io.StringIO()
    try:
        with redirect_stdout(buf):
            rc = report.main(list(dirs) + ["--out", out])
    except report.ReportError as e:
        rc = e.code
        buf.write(str(e))
    finally:
        matplotlib.figure.Figure.savefig = orig
    return rc, buf.getvalue(), figs


def summary(out):
    with open(os.path.join(out, "summary.json")) as f:
        return json.load(f)


def labelled_yticks(ax):
    """(value, text) of the y tick labels drawn inside the view of a drawn axes."""
    lo, hi = ax.get_ylim()
    return [(t.get_position()[1], t.get_text()) for t in ax.get_yticklabels(which="both")
            if t.get_visible() and t.get_text() and min(lo, hi) <= t.get_position()[1] <= max(lo, hi)]


def as_number(text):
    try:
        return float(text.replace("\u2212", "-"))
    except ValueError:
        return None


def check_log_ticks(fig, what):
    ax = fig.axes[0]
    ticks = labelled_yticks(ax)
    vals = [as_number(x) for _, x in ticks]
    check(ax.get_yscale() == "log", f"{what}: the loss axis is log scale ({ax.get_yscale()})")
    check(len(ticks) >= 3 and len(set(vals)) == len(vals) and None not in vals,
          f"{what}: {len(ticks)} distinct labelled ticks on the log loss axis (>= 3): {[x for _, x in ticks]}")
    # Each label reads as the value at its tick (to the precision printed).
    check(all(v is not None and abs(v - p) <= 0.01 * p for p, v in zip([p for p, _ in ticks], vals)),
          f"{what}: every tick label states its tick's value: {[(round(p, 6), x) for p, x in ticks]}")
    return ax


def loss_lines(ax):
    """(raw line, smoothed line) of one run on the loss axes: the thin faint one and the thick one."""
    lines = [l for l in ax.get_lines() if len(l.get_xdata()) > 1 and l.get_linestyle() == "-"]
    raw = [l for l in lines if (l.get_alpha() or 1.0) < 0.6]
    smooth = [l for l in lines if l.get_linewidth() >= 1.5 and (l.get_alpha() or 1.0) >= 0.9]
    return raw, smooth


# ---- one run: a usual loss curve, and a top-1 that moves by 0.0007 -----------------------------------
R1 = write_run("one")
O1 = os.path.join(TMP, "out_one")
rc, out, figs = run_report([R1], O1)
check(rc == 0 and {"loss_lr.png", "eval.png"} <= set(figs), f"report on one run exits 0 and draws loss_lr.png, eval.png (rc {rc})") or print(out)
ax = check_log_ticks(figs["loss_lr.png"], "one run (loss 2.3 -> 0.15)")
raw, smooth = loss_lines(ax)
check(len(raw) == 1 and len(smooth) == 1 and raw[0].get_linewidth() < smooth[0].get_linewidth(),
      f"the raw loss is drawn thin and faint (alpha {raw[0].get_alpha() if raw else None}), a smoothed line thick on top")
if raw and smooth:
    ry, sy = np.asarray(raw[0].get_ydata(), float), np.asarray(smooth[0].get_ydata(), float)
    check(list(raw[0].get_xdata()) == list(range(1, 301)) and list(smooth[0].get_xdata()) == list(range(1, 301)),
          "one run: loss plotted per step (x = 1..300)")
    # Noise: the smoothed line moves far less from point to point than the raw loss.
    rough_raw, rough_sm = np.mean(np.abs(np.diff(np.log(ry)))), np.nanmean(np.abs(np.diff(np.log(sy))))
    check(rough_sm < 0.25 * rough_raw, f"the smoothed line is smooth: mean |step change| of log loss {rough_sm:.4f} vs raw {rough_raw:.4f}")
    # It follows the loss: a centred mean of the raw values (interior points).
    k = report.smooth_half_width(300)
    j = 150
    check(abs(sy[j] - ry[j - k:j + k + 1].mean()) < 1e-9, f"smoothed value at step {j + 1} = mean of the {2 * k + 1} raw losses around it "
          f"({sy[j]:.6f} vs {ry[j - k:j + k + 1].mean():.6f})")
    # Only centred windows: no point near the ends is a mean of fewer steps (a spike at the end).
    fin = np.flatnonzero(np.isfinite(sy))
    check(len(fin) and fin[0] == k and fin[-1] == 299 - k and abs(sy[-k - 1] - ry[-(2 * k + 1):].mean()) < 1e-9,
          f"the smoothed line runs from step {k + 1} to {300 - k}, each point a full centred mean (no noisy ends)")
labels = [t.get_text() for t in ax.get_legend().get_texts()] if ax.get_legend() else []
check(any("per step" in x for x in labels) and any("smoothed" in x and "mean" in x for x in labels),
      f"the legend says which line is which: {labels}")

ev = figs["eval.png"]
a_loss, a_top1 = ev.axes[0], ev.axes[1]
lo, hi = a_top1.get_ylim()
check(hi - lo >= 0.05 - 1e-12 and 0.0 <= lo and hi <= 1.0,
      f"top-1 axis spans {hi - lo:.4f} >= 0.05 inside [0, 1] ({lo:.4f}..{hi:.4f})")
check(lo < 0.9101 and hi > 0.9108 and abs((lo + hi) / 2 - (0.9101 + 0.9108) / 2) < 1e-9,
      f"top-1 axis centred on the data 0.9101..0.9108 ({lo:.5f}..{hi:.5f})")
check((0.9108 - 0.9101) / (hi - lo) < 0.02, f"a 0.0007 change fills {(0.0007) / (hi - lo):.1%} of the top-1 panel (< 2%), not a cliff")
lo, hi = a_loss.get_ylim()
check(hi - lo >= 0.2 * 0.3 - 1e-12 and lo < 0.2999 and hi > 0.3001,
      f"test-loss axis spans {hi - lo:.4f} >= 20% of 0.3 around 0.2999..0.3001 ({lo:.4f}..{hi:.4f})")
check(a_top1.get_xlabel() == "epoch" and [l.get_text() for l in a_top1.get_xticklabels()
                                          if a_top1.get_xlim()[0] <= l.get_position()[0] <= a_top1.get_xlim()[1]] == ["1", "2", "3"],
      f"one run: evaluation per epoch, integer ticks ({a_top1.get_xlabel()})")
S = summary(O1)
f = S["plots"]["eval.png"]["axes"][1]
check(f["ylim"][1] - f["ylim"][0] >= 0.05 - 1e-12 and f["ylabel"] == "test top-1",
      f"summary.json records the top-1 limits {f['ylim']}")
fl = S["plots"]["loss_lr.png"]["axes"][0]
check(fl["yscale"] == "log" and len(fl["ytick_labels"]) >= 3, f"summary.json records the log axis labels {fl['ytick_labels']}")
md = open(os.path.join(O1, "report.md")).read()
check("not directly comparable" not in md and S["comparison"]["test_set_note"] is None and not ev.texts,
      "one run: no test-set note")

# ---- top-1 near 1: the minimum span stays inside [0, 1] ----------------------------------------------
R2 = write_run("near_one", top1=(0.995, 0.998, 0.999), test_loss=(0.02, 0.015, 0.012))
rc, out, figs = run_report([R2], os.path.join(TMP, "out_near_one"))
lo, hi = figs["eval.png"].axes[1].get_ylim()
check(rc == 0 and abs(hi - 1.0) < 1e-12 and abs(lo - 0.95) < 1e-9, f"top-1 0.995..0.999: axis 0.95..1.0 (got {lo:.4f}..{hi:.4f})")
lo, hi = figs["eval.png"].axes[0].get_ylim()
check(0 <= lo <= 0.012 and hi >= 0.02 and hi - lo >= 0.2 * 0.016 - 1e-12,
      f"test loss 0.012..0.02: axis {lo:.4f}..{hi:.4f} (covers the data, at least 0.2 x 0.016, never below 0)")
# A large change keeps matplotlib's own limits (the data fills the panel).
R3 = write_run("big_change", top1=(0.40, 0.70, 0.85), test_loss=(1.5, 0.9, 0.5))
rc, out, figs = run_report([R3], os.path.join(TMP, "out_big"))
lo, hi = figs["eval.png"].axes[1].get_ylim()
check(rc == 0 and lo < 0.40 and hi > 0.85 and hi - lo < 0.6, f"top-1 0.40..0.85: axis {lo:.3f}..{hi:.3f} (not widened)")

# One epoch evaluated: one labelled epoch tick (not 0.96 .. 1.04); a short run: no smoothed line, no crash.
R8 = write_run("one_epoch", steps_per_epoch=100, epochs=1, top1=(0.91,), test_loss=(0.3,))
rc, out, figs = run_report([R8], os.path.join(TMP, "out_one_epoch"))
a = figs["eval.png"].axes[1] if rc == 0 else None
xt = [l.get_text() for l in a.get_xticklabels() if a.get_xlim()[0] <= l.get_position()[0] <= a.get_xlim()[1]] if a else []
check(rc == 0 and xt == ["1"], f"one evaluated epoch: x ticks {xt}")
R9 = write_run("short", steps_per_epoch=4, epochs=1, top1=(), test_loss=())
rc, out, figs = run_report([R9], os.path.join(TMP, "out_short"))
raw, smooth = loss_lines(figs["loss_lr.png"].axes[0]) if rc == 0 else ([], [])
check(rc == 0 and len(smooth) == 0 and [l.get_label() for l in figs["loss_lr.png"].axes[0].get_lines()] == ["training loss, per step"]
      and any("no evaluation yet" in t.get_text() for t in figs["eval.png"].axes[1].texts),
      "4 steps, no evaluation: the raw loss alone, and 'no evaluation yet'")

# ---- log axes of other ranges ---------------------------------------------------------------------
R4 = write_run("wide", loss=lambda s, n: 10.0 * 10.0 ** (-4.0 * s / n))        # 10 -> 0.001: 4 decades
rc, out, figs = run_report([R4], os.path.join(TMP, "out_wide"))
ax = check_log_ticks(figs["loss_lr.png"], "loss over 4 decades")
check(any(abs(as_number(x) - 1.0) < 1e-12 for _, x in labelled_yticks(ax)) and len(labelled_yticks(ax)) <= 10,
      f"4 decades: powers of ten, not crowded ({[x for _, x in labelled_yticks(ax)]})")
R5 = write_run("narrow", loss=lambda s, n: 0.30 + 0.03 * ((s * 7919) % 101) / 100.0)  # 0.30..0.33
rc, out, figs = run_report([R5], os.path.join(TMP, "out_narrow"))
check_log_ticks(figs["loss_lr.png"], "loss within 0.30..0.33")
R6 = write_run("negative", loss=lambda s, n: -1.0 + 2.0 * s / n)  # not positive: linear axis
rc, out, figs = run_report([R6], os.path.join(TMP, "out_neg"))
check(rc == 0 and figs["loss_lr.png"].axes[0].get_yscale() == "linear", "a loss that is not positive stays on a linear axis")
if os.path.isfile(SAMPLE):
    R7 = os.path.join(TMP, "fmnist")
    os.makedirs(R7)
    with gzip.open(SAMPLE, "rb") as fi, open(os.path.join(R7, "metrics.jsonl"), "wb") as fo:
        shutil.copyfileobj(fi, fo)
    rc, out, figs = run_report([R7], os.path.join(TMP, "out_fmnist"))
    check(rc == 0, f"report on results/report's Fashion-MNIST run (rc {rc})")
    check_log_ticks(figs["loss_lr.png"], "results/report run (loss 2.3 -> 0.1)")
    lo, hi = figs["eval.png"].axes[1].get_ylim()
    check(hi - lo >= 0.05 - 1e-12, f"results/report run: top-1 0.8838..0.9108 on an axis of {hi - lo:.4f}")

# ---- two runs of different epoch lengths and batches overlay on images seen ------------------------
# a: 100 steps of 128 per epoch; b: 50 steps of 256 (the same images), and its test set is half.
A = write_run("a", steps_per_epoch=100, global_batch=128)
B = write_run("b", steps_per_epoch=50, global_batch=256, top1=(0.905, 0.912, 0.915), samples=5000, seed=2)
OAB = os.path.join(TMP, "out_ab")
rc, out, figs = run_report([A, B], OAB)
check(rc == 0, f"report a b exits 0 (rc {rc})") or print(out)
lax = figs["loss_lr.png"].axes
check("images seen" in lax[1].get_xlabel() and "epoch" not in lax[1].get_xlabel(),
      f"overlay x axis: {lax[1].get_xlabel()!r}")
raw, smooth = loss_lines(lax[0])
ends = sorted(max(l.get_xdata()) for l in smooth)
check(len(smooth) == 2 and ends == [300 * 128, 150 * 256], f"both runs end at 38,400 images seen (smoothed lines end at {ends})")
check(len(raw) == 2, "overlay: each run's raw loss drawn faint under its smoothed line")
leg = lax[0].get_legend()
check(leg is not None and {t.get_text() for t in leg.get_texts()} >= {"a", "b"} and "thin" in leg.get_title().get_text()
      and "mean" in leg.get_title().get_text(), f"overlay legend names the runs and says thin = per step, thick = mean "
      f"({leg.get_title().get_text() if leg else None!r})")
ea = figs["eval.png"].axes
xs = sorted(sorted(l.get_xdata()) for l in ea[1].get_lines() if len(l.get_xdata()) == 3)
check(xs == [[12800, 25600, 38400]] * 2, f"overlay evaluations at the same images seen in both runs ({xs})")
check(all("images seen" in a.get_xlabel() for a in ea), f"eval x axes: {[a.get_xlabel() for a in ea]}")
lo, hi = ea[1].get_ylim()
check(hi - lo >= 0.05 - 1e-12, f"overlay top-1 axis spans {hi - lo:.4f}")
md = open(os.path.join(OAB, "report.md")).read()
S = summary(OAB)
note_md = [l for l in md.splitlines() if "not directly comparable" in l]
check(len(note_md) == 1 and "10000" in note_md[0] and "5000" in note_md[0], f"report.md notes the different test sets: {note_md}")
check(S["comparison"]["test_sets_differ"] is True and S["comparison"]["x_axis"] == "images"
      and S["comparison"]["global_batch"] == {"a": 128, "b": 256}, f"summary.json comparison {S['comparison']}")
texts = [t.get_text() for t in figs["eval.png"].texts]
check(any("not directly comparable" in t for t in texts), f"eval.png carries the note: {texts}")
check("| test samples | 10000 | 5000 |" in md and "| global batch | 128 | 256 |" in md, "report.md shows both runs' test samples and global batch")
check("images seen" in md, "report.md says what the overlay x axis is")

# Same test set: no note.
C = write_run("c", steps_per_epoch=50, global_batch=256, seed=3)
OAC = os.path.join(TMP, "out_ac")
rc, out, figs = run_report([A, C], OAC)
md = open(os.path.join(OAC, "report.md")).read()
check(rc == 0 and "not directly comparable" not in md and not figs["eval.png"].texts
      and summary(OAC)["comparison"]["test_sets_differ"] is False, "same test set (10000 samples, same data.dir): no note")
# Same sample count, another data.dir: a note naming the data.
D = write_run("d", data_dir="/data/kmnist", seed=4)
OAD = os.path.join(TMP, "out_ad")
rc, out, figs = run_report([A, D], OAD)
md = open(os.path.join(OAD, "report.md")).read()
note_md = [l for l in md.splitlines() if "not directly comparable" in l]
check(rc == 0 and len(note_md) == 1 and "/data/kmnist" in note_md[0] and "/data/fmnist" in note_md[0]
      and any("not directly comparable" in t.get_text() for t in figs["eval.png"].texts),
      f"another data.dir: the note names both ({note_md})")
# A run whose global batch is unknown (no config, no images_per_s): every run on steps.
E = write_run("e", config=False, images_per_s=False, seed=5)
OAE = os.path.join(TMP, "out_ae")
rc, out, figs = run_report([A, E], OAE)
xl = figs["loss_lr.png"].axes[1].get_xlabel() if rc == 0 else ""
check(rc == 0 and xl.startswith("step") and "epoch" not in xl and summary(OAE)["comparison"]["x_axis"] == "step",
      f"a global batch unknown: the overlay falls back to steps ({xl!r})")
# Global batch not in the config but in images_per_s x step_ms: inferred.
F = write_run("f", config=False, steps_per_epoch=50, global_batch=256, seed=6)
rc, out, figs = run_report([A, F], os.path.join(TMP, "out_af"))
check(rc == 0 and "images seen" in figs["loss_lr.png"].axes[1].get_xlabel()
      and summary(os.path.join(TMP, "out_af"))["comparison"]["global_batch"]["f"] == 256,
      "global batch inferred from images_per_s x step_ms (256)")

if KEEP:
    shutil.rmtree(KEEP, ignore_errors=True)
    shutil.copytree(TMP, KEEP)
    print(f"reports kept in {KEEP}")
shutil.rmtree(TMP, ignore_errors=True)
if FAILURES:
    print(f"{len(FAILURES)} check(s) failed:", *FAILURES, sep="\n  ", flush=True)
    sys.exit(1)
print("all checks passed", flush=True)
