"""scripts/report.py: the plots (docs/report.md#what-the-plots-show)."""
import math
import os

from report_events import (
    GPU_FIELDS, LOG_MIN_LABELS, PARTS, SMOOTH_MIN_STEPS, SMOOTH_POINTS,
    TEST_LOSS_MIN_REL_SPAN, TOP1_MIN_SPAN, num)
from report_text import comparison


# ---- plots -----------------------------------------------------------------------------------------

def legend(ax, **kw):
    """A legend when the axes hold labelled artists (matplotlib warns otherwise)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**kw)


def smooth_half_width(n):
    """Half-width k of the smoothed loss's window (2k + 1 steps): about 1/SMOOTH_POINTS of n, >= 1."""
    return max(1, n // (2 * SMOOTH_POINTS))


def centred_mean(ys, k):
    """Centred rolling mean of ys over 2k + 1 points, ignoring NaN; NaN within k points of either end,
    where the window does not fit (a window shrunk there would leave the end points as noisy as the
    raw loss, a spike at the end of the line, and one cut on one side would pull the start of a
    falling loss down). The raw loss drawn under it shows those points."""
    import numpy as np
    y = np.asarray(ys, dtype=float)
    n = len(y)
    ok = np.isfinite(y)
    c = np.concatenate([[0.0], np.cumsum(np.where(ok, y, 0.0))])
    m = np.concatenate([[0], np.cumsum(ok)])
    out = np.full(n, np.nan)
    if n >= 2 * k + 1:
        i = np.arange(k, n - k)
        cnt = m[i + k + 1] - m[i - k]
        with np.errstate(invalid="ignore", divide="ignore"):
            out[k:n - k] = np.where(cnt > 0, (c[i + k + 1] - c[i - k]) / np.maximum(cnt, 1), np.nan)
    return out


def short_number(v, _pos=None):
    """Tick text of a count: 0, 500, 12k, 1.5M, 2G."""
    a = abs(v)
    for div, suf in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if a >= div:
            return f"{v / div:.3g}{suf}"
    return f"{v:.3g}"


def label_log_axis(ax, ticker):
    """Labelled ticks on a log y axis, at least LOG_MIN_LABELS of them inside the view: powers of ten
    when the data spans enough decades, else 1-2-5 of each decade, else 1..9, else evenly spaced values
    (a range narrower than a factor of ~1.3). Labels are plain numbers (0.2, 1, 2), minor ticks unlabelled."""
    lo, hi = ax.get_ylim()
    if not (lo > 0 and hi > lo):
        return
    ticks = []
    for subs in ((1.0,), (1.0, 2.0, 5.0), (1.0, 1.5, 2.0, 3.0, 5.0, 7.0), tuple(range(1, 10))):
        ticks = [m * 10.0 ** d for d in range(int(math.floor(math.log10(lo))), int(math.ceil(math.log10(hi))) + 1)
                 for m in subs if lo <= m * 10.0 ** d <= hi]
        if len(ticks) >= LOG_MIN_LABELS:
            break
    if len(ticks) < LOG_MIN_LABELS:
        ticks = [t for t in ticker.MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10]).tick_values(lo, hi) if lo <= t <= hi and t > 0]
    ax.yaxis.set_major_locator(ticker.FixedLocator(ticks))
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _p: f"{float(f'{v:.4g}'):g}"))
    ax.yaxis.set_minor_formatter(ticker.NullFormatter())
    ax.set_ylim(lo, hi)


def min_span(ax, values, span, lo_clip=None, hi_clip=None):
    """Sets the y limits to span at least `span`, centred on the values, shifted to stay inside
    [lo_clip, hi_clip]; values that already span more keep matplotlib's limits. So a change of 0.0007
    in top-1 is drawn as the small change it is, not as a cliff across the whole panel."""
    v = [x for x in values if x is not None and math.isfinite(x)]
    if not v or span <= 0:
        return
    lo, hi = min(v), max(v)
    if hi - lo >= span:
        a, b = ax.get_ylim()
    else:
        mid = (lo + hi) / 2.0
        a, b = mid - span / 2.0, mid + span / 2.0
    if lo_clip is not None and a < lo_clip:
        b, a = min(b + (lo_clip - a), hi_clip if hi_clip is not None else math.inf), lo_clip
    if hi_clip is not None and b > hi_clip:
        a, b = max(a - (b - hi_clip), lo_clip if lo_clip is not None else -math.inf), hi_clip
    ax.set_ylim(a, b)


def axes_facts(fig):
    """What a reader sees on each axes of a drawn figure (summary.json "plots", the tests): its
    labels, scale, limits and the tick labels drawn inside the view, and the figure's text lines."""
    out = {"axes": [], "texts": [t.get_text() for t in fig.texts if t.get_text()]}
    for ax in fig.axes:
        lo, hi = ax.get_ylim()
        xlo, xhi = ax.get_xlim()

        def drawn(labels, a, b):
            return [t.get_text() for t in labels if t.get_visible() and t.get_text()
                    and min(a, b) <= (t.get_position()[1] if labels is ylab else t.get_position()[0]) <= max(a, b)]
        ylab = ax.get_yticklabels(which="both")
        xlab = ax.get_xticklabels(which="both")
        out["axes"].append({"title": ax.get_title(), "xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(),
                            "yscale": ax.get_yscale(), "ylim": [lo, hi], "xlim": [xlo, xhi],
                            "ytick_labels": drawn(ylab, lo, hi), "xtick_labels": drawn(xlab, xlo, xhi),
                            "legend": [t.get_text() for t in ax.get_legend().get_texts()] if ax.get_legend() else [],
                            "legend_title": ax.get_legend().get_title().get_text() if ax.get_legend() else "",
                            "texts": [t.get_text() for t in ax.texts if t.get_text()]})
    return out


def plots(runs, out_dir, plt, comp=None, facts=None):
    """Writes the PNGs; returns [(file name, title)]. comp: comparison(runs) (the overlay x axis and the
    test-set note); facts, when given, receives axes_facts() of each PNG written, by file name."""
    from matplotlib import ticker, transforms
    comp = comp or comparison(runs)
    facts = {} if facts is None else facts
    many = len(runs) > 1
    span = max((max(s.times) - r.t_first for r in runs for s in r.sessions if s.times), default=0.0)
    tdiv, tname = (1.0, "seconds") if span < 120 else (60.0, "minutes") if span < 7200 else (3600.0, "hours")
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    done = []

    def save(fig, name, title, note=None):
        if note:
            fig.text(0.5, 0.01, note, ha="center", va="bottom", fontsize=8.5, color="#a00000", wrap=True)
            lines = math.ceil(len(note) * 5.0 / (fig.get_figwidth() * 72.0))  # ~5 pt a character at 8.5 pt
            fig.tight_layout(rect=(0, min(0.3, 0.02 + 0.04 * lines * 4.0 / fig.get_figheight()), 1, 1))
        else:
            fig.tight_layout()
        fig.canvas.draw()
        facts[name] = axes_facts(fig)
        fig.savefig(os.path.join(out_dir, name), dpi=110)
        plt.close(fig)
        done.append((name, title))

    def mark_restarts(ax, run, color, x_of):
        for s in run.sessions[1:]:
            x = x_of(s)
            if x is not None:
                ax.axvline(x, color=color if many else "grey", ls=":", lw=1)

    # The x axis of the per-step plots: steps for one run; for several, images seen (step x global
    # batch), the same quantity in every run whatever its epoch length or batch, else steps.
    images = comp["x_axis"] == "images"

    def xof(r, step):
        return None if step is None else step * r.global_batch() if images else step

    def x_axis(ax, what):
        if images:
            ax.set_xlabel(f"images seen (step \u00d7 global batch{'; ' + what if what else ''})")
            ax.xaxis.set_major_formatter(ticker.FuncFormatter(short_number))
        else:
            ax.set_xlabel(f"step{' (' + what + ')' if what else ''}")

    # Loss and learning rate per step: the raw loss thin and faint, a centred mean on top.
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    n_max = max((len(r.steps) for r in runs), default=0)
    k = smooth_half_width(n_max)
    smoothed = n_max >= SMOOTH_MIN_STEPS
    top = transforms.blended_transform_factory(a1.transData, a1.transAxes)
    for i, r in enumerate(runs):
        c = colors[i % len(colors)]
        xs = [xof(r, int(e["step"])) for e in r.steps]
        ys = [num(e.get("loss")) if num(e.get("loss")) is not None else math.nan for e in r.steps]
        sm = smoothed and len(ys) >= 2 * k + 1  # a run too short for the window: its raw loss only
        raw_label = (None if sm else r.label) if many else "training loss, per step"
        a1.plot(xs, ys, color=c, lw=0.6 if sm else 1, alpha=0.4 if sm else 1, label=raw_label)
        if sm:
            a1.plot(xs, centred_mean(ys, k), color=c, lw=1.8,
                    label=r.label if many else f"smoothed: centred mean of {2 * k + 1} steps")
        a2.plot(xs, [num(e.get("lr")) if num(e.get("lr")) is not None else math.nan for e in r.steps], color=c, lw=1, label=r.label)
        if r.skipped:
            a1.plot([xof(r, int(e["step"])) for e in r.skipped], [0.96] * len(r.skipped), "x", color="red", transform=top,
                    clip_on=False, label="skipped (non-finite)" if i == 0 else None)
        mark_restarts(a1, r, c, lambda s: xof(r, s.resumed_from))
        mark_restarts(a2, r, c, lambda s: xof(r, s.resumed_from))
    a1.set_ylabel("training loss")
    if any(r.steps for r in runs) and all(num(e.get("loss")) is None or num(e.get("loss")) > 0 for r in runs for e in r.steps):
        a1.set_yscale("log")
        a1.set_ylabel("training loss (log scale)")
        label_log_axis(a1, ticker)
    a2.set_ylabel("learning rate")
    x_axis(a2, "dotted: a restart resumed here" if any(s.resumed_from is not None for r in runs for s in r.sessions[1:]) else "")
    if many and smoothed:
        legend(a1, fontsize=8, title=f"thin: per step; thick: centred mean of {2 * k + 1} steps", title_fontsize=8)
    else:
        legend(a1, fontsize=8)
    if many:
        legend(a2, fontsize=8)
    a1.set_title("Training loss and learning rate" + (" per step" if not images else " by images seen"))
    save(fig, "loss_lr.png", "training loss and learning rate per step")

    # Test loss and top-1: per epoch for one run; on the common x axis for several (epochs of two
    # runs need not be the same length). Minimum spans keep a tiny change looking tiny.
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    any_eval = False
    all_loss, all_top1, last_values = [], [], []
    for i, r in enumerate(runs):
        c = colors[i % len(colors)]
        if many:
            ev = [e for e in r.evals if num(e.get("step")) is not None]
            xs = [xof(r, int(num(e["step"]))) for e in ev]
        else:
            ev = [e for e in r.evals if num(e.get("epoch")) is not None]
            xs = [num(e["epoch"]) for e in ev]
        if not ev:
            continue
        any_eval = True
        loss = [num(e.get("loss")) if num(e.get("loss")) is not None else math.nan for e in ev]
        top1 = [num(e.get("top1")) if num(e.get("top1")) is not None else math.nan for e in ev]
        all_loss += loss
        all_top1 += top1
        a1.plot(xs, loss, "o-", color=c, label=r.label, clip_on=False)
        a2.plot(xs, top1, "o-", color=c, label=r.label, clip_on=False)
        for a, ys in ((a1, loss), (a2, top1)):  # the last value, written on the plot (once the limits are set)
            if ys and math.isfinite(ys[-1]):
                last_values.append((a, xs[-1], ys[-1], c))
    for a, name in ((a1, "test loss"), (a2, "test top-1")):
        if many:
            x_axis(a, "")
        else:
            a.set_xlabel("epoch")
            eps = sorted({num(e["epoch"]) for r in runs for e in r.evals if num(e.get("epoch")) is not None})
            if 0 < len(eps) <= 12:  # every epoch evaluated, labelled (one epoch: no 0.96 .. 1.04 ticks)
                a.set_xticks(eps)
                a.set_xticklabels([f"{x:g}" for x in eps])
                if len(eps) == 1:
                    a.set_xlim(eps[0] - 0.5, eps[0] + 0.5)
            else:
                a.xaxis.get_major_locator().set_params(integer=True)
        a.set_ylabel(name)
        if not any_eval:
            a.text(0.5, 0.5, "no evaluation yet (train.eval)", ha="center", va="center", transform=a.transAxes)
        elif many:
            legend(a, fontsize=8)
    if any_eval:
        fin = [x for x in all_loss if math.isfinite(x)]
        if fin:
            min_span(a1, fin, TEST_LOSS_MIN_REL_SPAN * abs(max(fin) + min(fin)) / 2.0, lo_clip=0.0 if min(fin) >= 0 else None)
        min_span(a2, all_top1, TOP1_MIN_SPAN, 0.0, 1.0)
    for a, x, y, c in last_values:  # above the point, or below it when the point is near the top
        lo, hi = a.get_ylim()
        high = hi > lo and (y - lo) / (hi - lo) > 0.85
        a.annotate(f"{y:.4f}", (x, y), textcoords="offset points", xytext=(0, -9 if high else 7),
                   ha="center", va="top" if high else "bottom", fontsize=8, color=c)
    a1.set_title("Test loss" + (" per epoch" if not many else ""))
    a2.set_title("Test top-1" + (" per epoch" if not many else ""))
    note = comp.get("test_set_note")
    save(fig, "eval.png", "test loss and top-1" + (" per epoch" if not many else ""),
         note=("Note: " + note + ".") if note else None)

    # Throughput over time.
    fig, ax = plt.subplots(figsize=(9, 4))
    for i, r in enumerate(runs):
        c = colors[i % len(colors)]
        for si, s in enumerate(r.sessions):
            pts = [(r.rel_time(e) / tdiv, num(e.get("images_per_s"))) for e in r.steps
                   if e.get("_session") == si and r.rel_time(e) is not None and num(e.get("images_per_s")) is not None]
            if not pts:
                continue
            xs, ys = zip(*pts)
            ax.plot(xs, ys, color=c, lw=0.6, alpha=0.35)
            k = max(1, len(ys) // 50)
            sm = [sum(ys[max(0, j - k):j + k + 1]) / len(ys[max(0, j - k):j + k + 1]) for j in range(len(ys))]
            ax.plot(xs, sm, color=c, lw=1.8, label=(r.label if many else "images/s (smoothed)") if si == 0 else None)
        mark_restarts(ax, r, c, lambda s: (min(s.times) - r.t_first) / tdiv if s.times else None)
    ax.set_xlabel(f"{tname} since the run's first start (dotted: a restart)")
    ax.set_ylabel("images/s (global)")
    ax.set_ylim(bottom=0)
    legend(ax, fontsize=8)
    ax.set_title("Throughput over time")
    save(fig, "throughput.png", "throughput over time")

    # Step-time breakdown.
    names = [n for _, n in PARTS] + ["other", "checkpoint"]
    pc = {n: colors[j % len(colors)] for j, n in enumerate(names)}
    if not many:
        r = runs[0]
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.2), gridspec_kw={"width_ratios": [3, 1.3]})
        ck = {}
        for c in r.checkpoints():
            if num(c.get("step")) is not None:
                ck[int(c["step"])] = ck.get(int(c["step"]), 0.0) + r.checkpoint_lost_ms(c)
        steps = r.steps
        nb = min(200, max(len(steps), 1))
        bins = [steps[j * len(steps) // nb:(j + 1) * len(steps) // nb] for j in range(nb)]
        bins = [b for b in bins if b]
        xs = [sum(int(e["step"]) for e in b) / len(b) for b in bins]
        series = []
        for f, n in PARTS:
            series.append([sum(num(e.get(f)) or 0.0 for e in b) / len(b) for b in bins])
        series.append([max(sum((num(e.get("step_ms")) or 0.0) - sum(num(e.get(f)) or 0.0 for f, _ in PARTS) for e in b) / len(b), 0.0)
                       for b in bins])
        series.append([sum(ck.get(int(e["step"]), 0.0) for e in b) / len(b) for b in bins])
        if xs:
            a1.stackplot(xs, series, labels=names, colors=[pc[n] for n in names], alpha=0.85)
        a1.set_xlabel("step" + (f" (mean of {len(steps) // nb} steps per point)" if len(steps) // nb > 1 else ""))
        a1.set_ylabel("ms per step")
        a1.set_title("Where the step time goes")
        legend(a1, fontsize=7, loc="upper right")
        n = max(len(steps), 1)
        means = [sum(s_) / len(s_) if s_ else 0.0 for s_ in series]
        means[-1] = sum(ck.values()) / n
        a2.barh(names[::-1], means[::-1], color=[pc[x] for x in names[::-1]])
        a2.set_xlabel("mean ms per step")
        a2.set_title("Mean over the run")
    else:
        fig, ax = plt.subplots(figsize=(10, 1.8 + 0.6 * len(runs)))
        left = [0.0] * len(runs)
        for j, n in enumerate(names):
            vals = []
            for r in runs:
                k = max(len(r.steps), 1)
                if n == "other":
                    v = sum(max((num(e.get("step_ms")) or 0.0) - sum(num(e.get(f)) or 0.0 for f, _ in PARTS), 0.0) for e in r.steps) / k
                elif n == "checkpoint":
                    v = sum(r.checkpoint_lost_ms(c) for c in r.checkpoints()) / k
                else:
                    f = PARTS[j][0]
                    v = sum(num(e.get(f)) or 0.0 for e in r.steps) / k
                vals.append(v)
            ax.barh([r.label for r in runs], vals, left=left, color=pc[n], label=n)
            left = [a + b for a, b in zip(left, vals)]
        ax.set_xlabel("mean ms per step")
        legend(ax, fontsize=7, ncol=len(names), loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
        ax.set_title("Where the step time goes", pad=24)
    save(fig, "step_breakdown.png", "step-time breakdown")

    # GPU (NVML) figures.
    series = [(r, r.gpu_series()) for r in runs]
    if any(g for _, g in series):
        fig, axes = plt.subplots(2, 2, figsize=(11, 6.5), sharex=True)
        for ax, (f, title) in zip(axes.flat, GPU_FIELDS):
            for i, (r, g) in enumerate(series):
                for rank, pts in sorted(g.get(f, {}).items()):
                    xs, ys = [], []
                    for j, (t, v, si) in enumerate(pts):
                        if j and si != pts[j - 1][2]:  # no line across the gap between two starts
                            xs.append(math.nan)
                            ys.append(math.nan)
                        xs.append(t / tdiv)
                        ys.append(v / 2**30 if f.endswith("_bytes") else v)
                    ls = ["-", "--", "-.", ":"][rank % 4]
                    lab = (f"{r.label} " if many else "") + f"rank {rank}"
                    ax.plot(xs, ys, ls, color=colors[(i if many else rank) % len(colors)], lw=1, label=lab)
                if f == "gpu_memory_used_bytes":
                    for rank, pts in sorted(g.get("gpu_memory_total_bytes", {}).items())[:1]:
                        ax.axhline(pts[-1][1] / 2**30, color="grey", ls="--", lw=0.8)
            if f == "gpu_util_pct":
                for limit in sorted({r.gpu_util_limit() for r, _ in series}):  # each run's watchdog limit
                    ax.axhline(limit, color="red", ls=":", lw=1)
                ax.set_ylim(0, 105)
            ax.set_title(title)
            if ax.get_lines():
                legend(ax, fontsize=7)
        for ax in axes[1]:
            ax.set_xlabel(f"{tname} since the run's first start")
        save(fig, "gpu.png", "GPU utilisation, memory, temperature and power")
    return done
