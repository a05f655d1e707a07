"""scripts/report.py: the verdict on a run (docs/report.md#verdict): its problems and remarks."""
from report_events import CHECKPOINT_SHARE_MAX, JITTER_MAX, NONFINITE_SHARE_MAX


def warning_text(e):
    for k in ("message", "text", "msg", "detail"):
        if isinstance(e.get(k), str):
            return e[k]
    return ", ".join(f"{k}={v}" for k, v in e.items() if k not in ("event", "time"))


def verdict(run, S):
    """(healthy, problems, remarks): problems make a run not healthy; remarks are worth knowing."""
    problems, remarks = [], []
    sh = S["shares"]
    data_max, comm_max = run.share_limits()
    if S["kept_step_records"] == 0:
        if not any(s.end is not None for s in run.sessions):
            return {"healthy": None, "problems": [], "remarks": ["no training step logged yet"] + list(S["notes"])}
        problems.append("no training step was logged")
    if sh.get("data", 0) > data_max:
        problems.append(f"data-bound: {sh['data']:.0%} of the step time waits for data (over {data_max:.0%}): "
                        "keep data.prefetch on, stage the dataset on local disk (data.stage_dir), or read fewer, larger shards")
    if sh.get("exposed allreduce", 0) > comm_max:
        problems.append(f"communication-bound: {sh['exposed allreduce']:.0%} of the step time waits for the gradient "
                        f"allreduce after backward (over {comm_max:.0%}): a larger train.global_batch per rank or "
                        "train.accumulation_steps, another dist.bucket_mb, fewer ranks per node or a faster network")
    if S["gpu_util_mean_pct"] is not None and S["gpu_util_mean_pct"] < S["gpu_util_min_pct"]:
        problems.append(f"low GPU utilisation: {S['gpu_util_mean_pct']:.0f}% on average (under {S['gpu_util_min_pct']:.0f}%): "
                        "the GPU waits (data, communication or a batch too small for it)")
    div = {k: v for k, v in S["warning_kinds"].items() if any(w in k.lower() for w in ("diverg", "slow", "straggl", "imbalance"))}
    if div:
        problems.append("divergent ranks: the watchdog warned " + ", ".join(f"{k} x{v}" for k, v in div.items())
                        + " (a slow node or GPU; see the warnings below)")
    others = {k: v for k, v in S["warning_kinds"].items() if k not in div}
    if others:
        problems.append("the watchdog warned: " + ", ".join(f"{k} x{v}" for k, v in sorted(others.items())))
    n = max(S["kept_step_records"] + S["nonfinite_skipped"], 1)
    if S["nonfinite_skipped"]:
        msg = f"{S['nonfinite_skipped']} step(s) skipped for a non-finite loss or gradient ({S['nonfinite_skipped'] / n:.1%} of the steps)"
        (problems if S["nonfinite_skipped"] / n > NONFINITE_SHARE_MAX else remarks).append(
            msg + ": lower optim.lr or use a warm-up, check the data")
    if S["final_loss"] is None and S["kept_step_records"]:
        problems.append("the last logged training loss is not finite")
    if S["checkpoint_share"] > CHECKPOINT_SHARE_MAX:
        problems.append(f"checkpoints cost {S['checkpoint_share']:.0%} of the training time (over {CHECKPOINT_SHARE_MAX:.0%}): "
                        "checkpoint less often (checkpoint.every_steps, checkpoint.every_minutes or checkpoint.mtbf_minutes)")
    if "checkpoint_failed" in S["statuses"]:
        problems.append("a checkpoint write failed (run_end status checkpoint_failed)")
    p50, p95 = S["step_ms_p50"], S["step_ms_p95"]
    if p50 and p95 and p95 / p50 > JITTER_MAX:
        remarks.append(f"irregular step times: p95 {p95:.0f} ms is {p95 / p50:.1f}x the median {p50:.0f} ms")
    if S["killed"]:
        remarks.append(f"{S['killed']} start(s) ended without run_end (killed or crashed)"
                       + (f"; {S['redone_steps']} step(s), {S['redone_s']:.1f} s, were done again after resuming" if S["redone_steps"] else ""))
    elif S["redone_steps"]:
        remarks.append(f"{S['redone_steps']} step(s), {S['redone_s']:.1f} s, were done again after resuming from an older checkpoint")
    if S["preemptions"]:
        remarks.append(f"preempted or stopped {S['preemptions']} time(s), each resumed from its stop checkpoint")
    if S["budget_stops"]:
        remarks.append(f"stopped by its budget {S['budget_stops']} time(s)")
    last = S["statuses"][-1] if S["statuses"] else "?"
    if last == "running":
        remarks.append("the run is still going (figures so far)")
    elif last == "stopped":
        remarks.append("the last start was stopped before the end: rerun the same command to resume")
    elif last in ("killed", "no run_end"):
        remarks.append("the last start has no run_end: killed, crashed, or still starting")
    for nt in S["notes"]:
        remarks.append(nt)
    return {"healthy": not problems, "problems": problems, "remarks": remarks}


def verdict_word(v):
    return "too early to tell" if v["healthy"] is None else "healthy" if v["healthy"] else "not healthy"
