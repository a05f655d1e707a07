"""scripts/report.py: the text of report.md (tables, verdict lines, warnings, the comparison of runs)."""
import math

from report_events import num
from report_verdict import verdict_word, warning_text


# ---- text ------------------------------------------------------------------------------------------

def fmt_s(s):
    if s is None or not math.isfinite(s):
        return "-"
    s = float(s)
    if s < 120:
        return f"{s:.1f} s"
    h, rem = divmod(int(round(s)), 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d} h" if h else f"{m}:{sec:02d} min"


def fmt(v, spec=".4f", dash="-"):
    return dash if v is None else format(v, spec)


def money(v):
    return "-" if v is None else f"{v:,.2f}" if v >= 1 else f"{v:.4f}"


def run_table(S):
    rows = [
        ("run directory", S["run_dir"]),
        ("model, devices, ranks", f"{S['model'] or '?'}, {S['devices']}, {S['world_size']} rank(s)"
                                  + (f" on {len(set(S['hosts']))} host(s)" if S["hosts"] else "")),
        ("status of each start", ", ".join(S["statuses"]) or "-"),
        ("steps", f"{S['steps']}" + (f" of {int(S['total_steps'])}" if S["total_steps"] else "")),
        ("restarts", f"{S['restarts']} (preemptions/stops {S['preemptions']}, killed or crashed {S['killed']}, budget stops {S['budget_stops']})"),
        ("wall time", f"{fmt_s(S['wall_s'])} over {S['starts']} start(s) (first to last event {fmt_s(S['elapsed_s'])})"),
        ("time per epoch", f"{fmt_s(S['epoch_s_mean'])} (mean over {S['full_epochs']} full epoch(s), training and evaluation)"),
        ("step time", f"mean {fmt(S['step_ms_mean'], '.1f')} ms, p50 {fmt(S['step_ms_p50'], '.1f')} ms, p95 {fmt(S['step_ms_p95'], '.1f')} ms"),
        ("throughput", f"{fmt(S['images_per_s'], ',.0f')} images/s ({S['images']:,.0f} images in {fmt_s(S['train_s'])} of steps)"),
        ("checkpoints", f"{S['checkpoints']} written, {fmt_s(S['checkpoint_lost_s'])} of training time lost to them "
                        f"({S['checkpoint_share']:.1%}), {fmt_s(S['checkpoint_write_s'])} writing"),
        ("steps done again", f"{S['redone_steps']} ({fmt_s(S['redone_s'])})"),
        ("non-finite steps skipped", f"{S['nonfinite_skipped']}"),
        ("test top-1", f"final {fmt(S['final_top1'])}, best {fmt(S['best_top1'])}"
                       + (f" (epoch {S['best_top1_epoch']})" if S["best_top1_epoch"] is not None else "")),
        ("final losses", f"train {fmt(S['final_loss'])}, test {fmt(S['final_test_loss'])}"),
        (S["device_unit"], f"{S['device_hours']:.4f}" + ("" if S["devices"] == "cuda" else " (a CPU run: ranks x wall time)")),
        ("cost on demand", "-" if S["cost"] is None else f"{money(S['cost'])} at {S['price_per_gpu_hour']:g} per {S['device_unit'][:-1]}"
                           + (f", {money(S['cost_per_epoch'])} per epoch" if S["cost_per_epoch"] is not None else "")),
        ("cost on spot", "-" if S["spot_cost"] is None else f"{money(S['spot_cost'])} at {S['spot_price_per_gpu_hour']:g} per {S['device_unit'][:-1]}"),
        ("watchdog warnings", f"{S['warnings']}" + (" (" + ", ".join(f"{k} x{v}" for k, v in sorted(S["warning_kinds"].items())) + ")" if S["warnings"] else "")),
    ]
    if S["gpu_util_mean_pct"] is not None:
        rows.append(("GPU", f"utilisation mean {S['gpu_util_mean_pct']:.0f}% ({S['gpu_util_low_share']:.0%} of samples under {S['gpu_util_min_pct']:.0f}%), "
                            f"memory max {fmt((S['gpu_memory_max_bytes'] or 0) / 2**30, '.1f')} GiB, "
                            f"temperature max {fmt(S['gpu_temperature_max_c'], '.0f')} C, power mean {fmt(S['gpu_power_mean_w'], '.0f')} W"))
    if S["recorded_budget_fields"]:
        rows.append(("recorded by the run (last run_end)", ", ".join(f"{k} {v}" for k, v in S["recorded_budget_fields"].items())))
    out = ["| | |", "|---|---|"]
    out += [f"| {k} | {v} |" for k, v in rows]
    return out


def verdict_lines(S):
    v = S["verdict"]
    if v["healthy"] is None:
        return ["**Too early to tell.**"] + [f"- note: {r}" for r in v["remarks"]]
    out = [("**Healthy.**" if v["healthy"] else "**Not healthy.**") + (" " + v["problems"][0] if v["problems"] else
                                                                     " No problem found: data, communication, checkpoints"
                                                                     + (", GPU utilisation" if S["gpu_util_mean_pct"] is not None else "")
                                                                     + " and the losses are within bounds.")]
    for p in v["problems"][1:]:
        out.append(f"- also: {p}")
    for r in v["remarks"]:
        out.append(f"- note: {r}")
    return out


def epoch_table(S):
    out = ["| epoch | steps | train time | images/s | test loss | top-1 |", "|---|---|---|---|---|---|"]
    for d in S["epochs"]:
        ips = d["images"] / d["train_s"] if d["train_s"] > 0 else None
        out.append(f"| {d['epoch']} | {d['steps']} | {fmt_s(d['train_s'])} | {fmt(ips, ',.0f')} | {fmt(d.get('test_loss'))} | {fmt(d.get('top1'))} |")
    return out


def breakdown_table(S):
    tot = sum(S["parts_ms"].values())
    n = max(S["kept_step_records"], 1)
    out = ["| part | mean per step | share |", "|---|---|---|"]
    for name, v in S["parts_ms"].items():
        out.append(f"| {name} | {v / n:.2f} ms | {S['shares'][name]:.1%} |")
    step_sum = (S["step_ms_mean"] or 0) * S["kept_step_records"]
    other = step_sum - tot
    if step_sum > 0:
        out.append(f"| other (metrics, checks) | {other / n:.2f} ms | {other / step_sum:.1%} |")
    out.append(f"| checkpoints (outside the steps) | {S['checkpoint_lost_s'] * 1000 / n:.2f} ms | - |")
    return out


def restart_list(run):
    """The relaunches inside the allocation (slurm/train.sbatch, docs/slurm.md#restarts)."""
    rs = run.restarts_inside()
    if not rs:
        return []
    out = ["", f"### Restarts inside the allocation ({len(rs)})", ""]
    for r in rs:
        nodes = ", ".join(map(str, r.get("nodes") or []))
        cost = f"{fmt_s(r['lost_s'])} from the last step before it until step {r.get('last_step')} was passed again" \
            if r.get("lost_s") is not None else "not yet past the failed step"
        since = num(r.get("seconds_since_last_step"))
        out.append(f"- restart {r.get('restart')} ({r.get('mode', '?')}) after step {r.get('last_step')}: "
                   f"{r.get('cause', '?')}; relaunched on {nodes} (world size {r.get('previous_world_size')} -> "
                   f"{r.get('world_size')}) {fmt_s(since) if since is not None else '?'} after the last step; cost {cost}")
    return out


def warning_list(run, limit=20):
    w = run.warnings()
    if not w:
        return []
    out = ["", f"### Warnings ({len(w)})", "", "| time | steps | kind | message | knob |", "|---|---|---|---|---|"]

    def cell(v):
        return str(v).replace("|", "\\|").replace("\n", " ")
    for e in w[:limit]:
        k = e.get("kind") or e.get("cause") or e.get("reason") or e.get("type") or "warning"
        steps = f"{e['first_step']}-{e.get('step')}" if "first_step" in e else e.get("step", "-")
        out.append(f"| {fmt_s(run.rel_time(e))} | {steps} | {cell(k)} | {cell(warning_text(e))} | {cell(e.get('knob', ''))} |")
    if len(w) > limit:
        out.append(f"| ... | | | {len(w) - limit} more in metrics.jsonl | |")
    return out


def comparison(runs):
    """What the overlay plots share: their x axis (images seen when every run's global batch is known,
    else steps; one run: steps and epochs) and whether the runs that evaluated used different test sets
    (different `samples` counts, or different data), which makes their accuracies not comparable."""
    many = len(runs) > 1
    gbs = [r.global_batch() for r in runs]
    x_axis = "step" if not many or not all(gbs) else "images"
    C = {"x_axis": x_axis, "global_batch": {r.label: g for r, g in zip(runs, gbs)},
         "test_sets": {}, "test_sets_differ": False, "test_set_note": None}
    sets = [(r.label,) + r.test_set() for r in runs if r.evals]
    C["test_sets"] = {l: {"samples": n, "data": d} for l, n, d in sets}
    if many and len(sets) > 1:
        why = []
        if len({n for _, n, _ in sets if n is not None}) > 1:
            why.append("test samples " + ", ".join(f"{l} {n if n is not None else '?'}" for l, n, _ in sets))
        if len({d for _, _, d in sets if d is not None}) > 1:
            why.append("test data " + ", ".join(f"{l} {d or '?'}" for l, _, d in sets))
        if why:
            C["test_sets_differ"] = True
            C["test_set_note"] = ("the runs evaluated on different test sets (" + "; ".join(why) +
                                  "): their top-1 and test loss are not directly comparable")
    return C


def markdown(runs, summaries, pngs, comp=None):
    out = ["# hpctrain report", ""]
    comp = comp or {}
    if len(runs) > 1:
        out += ["| | " + " | ".join(r.label for r in runs) + " |", "|---|" + "---|" * len(runs)]
        for key, name, f in [("steps", "steps", str), ("restarts", "restarts", str), ("wall_s", "wall time", fmt_s),
                             ("step_ms_p50", "p50 step (ms)", lambda v: fmt(v, ".1f")),
                             ("images_per_s", "images/s", lambda v: fmt(v, ",.0f")),
                             ("final_top1", "final top-1", fmt), ("best_top1", "best top-1", fmt),
                             ("device_hours", "device-hours", lambda v: f"{v:.4f}"), ("cost", "cost", money)]:
            out.append(f"| {name} | " + " | ".join(f(S[key]) for S in summaries) + " |")
        gb = comp.get("global_batch", {})
        out.append("| global batch | " + " | ".join(str(gb.get(r.label) or "?") for r in runs) + " |")
        ts = comp.get("test_sets", {})
        out.append("| test samples | " + " | ".join(str(ts.get(r.label, {}).get("samples") or "-") for r in runs) + " |")
        out.append("| verdict | " + " | ".join(verdict_word(S["verdict"]) for S in summaries) + " |")
        out.append("")
        if comp.get("test_set_note"):
            out += [f"**Note:** {comp['test_set_note'][0].upper()}{comp['test_set_note'][1:]}.", ""]
        out += [("The overlay plots put every run on **images seen** (step × global batch), the same amount of "
                 "training in every run whatever its epoch length." if comp.get("x_axis") == "images" else
                 "The overlay plots put every run on **steps** (the global batch of a run is not known: "
                 "train.global_batch missing from its config)."), ""]
    for run, S in zip(runs, summaries):
        if len(runs) > 1:
            out += [f"## {run.label}", ""]
        out += verdict_lines(S) + [""] + run_table(S) + [""]
        out += ["### Epochs", ""] + epoch_table(S) + [""]
        out += ["### Step time", ""] + breakdown_table(S)
        out += restart_list(run)
        out += warning_list(run)
        out.append("")
    out += ["## Plots", ""]
    for p, title in pngs:
        out += [f"![{title}]({p})", ""]
    return "\n".join(out)
