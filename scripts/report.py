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
import configparser
import errno
import fcntl
import json
import math
import os
import sys

EXIT_OK, EXIT_RUNTIME, EXIT_USAGE = 0, 1, 2

# Verdict thresholds (docs/report.md#verdict): shares of the summed step time over the kept steps.
# Data-bound and communication-bound use the run's own watchdog limits, watchdog.max_data_share and
# watchdog.max_comm_share of the config in its run_start event (Run.share_limits), so the report and
# the watchdog (src/train/watchdog.cpp) judge alike. These are the watchdog's defaults
# (src/train/config.hpp, Config::Watchdog), used only for a metrics.jsonl whose run_start lacks them.
WATCHDOG_DEFAULT_MAX_DATA_SHARE = 0.3   # waiting for data above this: data-bound
WATCHDOG_DEFAULT_MAX_COMM_SHARE = 0.5   # exposed allreduce above this: communication-bound
GPU_UTIL_MIN_PCT = 70.0      # mean GPU utilisation below this: the GPU idles
CHECKPOINT_SHARE_MAX = 0.10  # training time lost to checkpoints above this: checkpoint too often
NONFINITE_SHARE_MAX = 0.01   # skipped (non-finite) steps above this share of the steps
JITTER_MAX = 2.0             # p95 / p50 step time above this: irregular steps

# Plots (docs/report.md#what-the-plots-show): what keeps a small change from looking like a cliff.
TOP1_MIN_SPAN = 0.05              # the top-1 axis spans at least 5 points, centred on the data, within [0, 1]
TEST_LOSS_MIN_REL_SPAN = 0.20     # the test-loss axis spans at least 20% of the data's middle value
LOG_MIN_LABELS = 3                # a log loss axis shows at least this many labelled ticks
SMOOTH_POINTS = 50                # the smoothed loss: a centred mean over 1/50 of the steps (odd, at least 3)
SMOOTH_MIN_STEPS = 10             # fewer steps than this: no smoothed line (nothing to smooth)

PARTS = [("data_ms", "data"), ("forward_ms", "forward"), ("backward_ms", "backward"),
         ("allreduce_ms", "exposed allreduce"), ("optimizer_ms", "optimizer")]
GPU_FIELDS = [("gpu_util_pct", "GPU utilisation (%)"), ("gpu_memory_used_bytes", "GPU memory used (GiB)"),
              ("gpu_temperature_c", "GPU temperature (C)"), ("gpu_power_w", "GPU power (W)")]


class ReportError(Exception):
    def __init__(self, message, code=EXIT_USAGE):
        super().__init__(message)
        self.code = code


MAX_MAGNITUDE = 1e15  # above any real field (Unix times ~2e9, bytes ~1e12): a damaged value


def num(v):
    """A finite float of a sane magnitude, or None (null, missing, NaN, text, a damaged number)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        v = float(v)
    except OverflowError:
        return None
    return v if math.isfinite(v) and abs(v) <= MAX_MAGNITUDE else None


def percentile(values, q):
    """Linear-interpolated percentile, q in [0, 100]; None for no values."""
    if not values:
        return None
    s = sorted(values)
    pos = (len(s) - 1) * q / 100.0
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


# ---- reading ---------------------------------------------------------------------------------------

def read_events(run_dir):
    """The events of RUN_DIR/metrics.jsonl in file order, and notes about lines that were not read.
    A last line without its newline is a line being written (or cut by a kill): ignored unless it
    parses. Raises ReportError (exit 2) when RUN_DIR is not a run directory with events."""
    if not os.path.exists(run_dir):
        raise ReportError(f"RUN_DIR {run_dir}: no such directory")
    if not os.path.isdir(run_dir):
        raise ReportError(f"RUN_DIR {run_dir}: not a directory (give the run directory, run.dir, that holds metrics.jsonl)")
    path = os.path.join(run_dir, "metrics.jsonl")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise ReportError(f"{path}: no such file (is {run_dir} an hpctrain run directory? docs/run_directory.md)")
    except OSError as e:
        raise ReportError(f"{path}: cannot read: {e.strerror}", EXIT_RUNTIME)
    lines = data.split(b"\n")
    partial = lines.pop() if lines else b""  # text after the last newline: a line still being written
    events, bad = [], []
    for i, raw in enumerate(lines + ([partial] if partial.strip() else [])):
        if not raw.strip():
            continue
        try:
            e = json.loads(raw.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            e = None
        if not isinstance(e, dict) or not isinstance(e.get("event"), str):
            bad.append(i + 1)
            continue
        events.append(e)
    notes = []
    cut = bool(partial.strip()) and bad and bad[-1] == len(lines) + 1
    if cut:
        bad.pop()
        notes.append(f"the last line of metrics.jsonl is incomplete ({len(partial)} bytes; the run is writing it, or was killed mid-line): ignored")
    if bad:
        notes.append(f"{len(bad)} line(s) of metrics.jsonl are not metrics events (line {', '.join(map(str, bad[:5]))}"
                     f"{', ...' if len(bad) > 5 else ''}): ignored")
    if not events:
        what = (f"{len(bad)} unreadable line(s)" if bad else "only an incomplete first line: the run may be starting"
                if cut else "it is empty")
        raise ReportError(f"{path}: no metrics events ({what}); not an hpctrain metrics file (docs/metrics.md)")
    return events, notes


def owner_running(run_dir):
    """(True, holder text) when a job holds the flock on RUN_DIR/.owner (docs/run_directory.md)."""
    p = os.path.join(run_dir, ".owner")
    try:
        fd = os.open(p, os.O_RDONLY)
    except OSError:
        return False, ""
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                with open(p) as f:
                    return True, " ".join(f.read().split())
            return False, ""
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False, ""
    finally:
        os.close(fd)


class Session:
    """One start of `hpctrain train` on the run directory: its resume and run_start events, what it
    logged, and its run_end (None when it was killed, crashed, or is still running)."""

    def __init__(self):
        self.resume = None
        self.start = None
        self.end = None
        self.events = []

    @property
    def resumed_from(self):
        if self.start is not None and num(self.start.get("resumed_from_step")) is not None:
            return int(self.start["resumed_from_step"])
        if self.resume is not None and num(self.resume.get("step")) is not None:
            return int(self.resume["step"])
        return None

    @property
    def times(self):
        return [t for t in (num(e.get("time")) for e in self.events) if t is not None]

    def duration_s(self):
        """Seconds this start ran: first to last event, at least run_end's wall_s (start-up before
        run_start, and time after the last line of a killed start, are not seen)."""
        ts = self.times
        d = max(ts) - min(ts) if ts else 0.0
        w = num(self.end.get("wall_s")) if self.end else None
        return max(d, w or 0.0)

    def world_size(self):
        w = num(self.start.get("world_size")) if self.start else None
        return int(w) if w else 1


def split_sessions(events):
    """Events grouped by start: a `resume` or `run_start` begins a session (resume comes first)."""
    sessions = []
    cur = None
    for e in events:
        kind = e["event"]
        if kind == "resume" or (kind == "run_start" and not (cur and cur.resume is not None and cur.start is None
                                                             and all(x["event"] == "resume" for x in cur.events))):
            cur = Session()
            sessions.append(cur)
        elif cur is None:
            cur = Session()
            sessions.append(cur)
        cur.events.append(e)
        if kind == "resume":
            cur.resume = e
        elif kind == "run_start":
            cur.start = e
        elif kind == "run_end":
            cur.end = e
    return sessions


class Run:
    """Everything the report shows about one run directory."""

    def __init__(self, run_dir, label):
        self.dir = run_dir
        self.label = label
        self.events, self.notes = read_events(run_dir)
        self.sessions = split_sessions(self.events)
        self.running, self.owner = owner_running(run_dir)
        self._keep()
        self.t_first = min((t for s in self.sessions for t in s.times), default=0.0)
        cfg_text = next((s.start.get("config") for s in reversed(self.sessions) if s.start and isinstance(s.start.get("config"), str)), "")
        self.config = configparser.ConfigParser(interpolation=None, strict=False)
        try:
            self.config.read_string(cfg_text)
        except configparser.Error:
            pass
        last_start = next((s.start for s in reversed(self.sessions) if s.start), {}) or {}
        self.last_start = last_start
        self.devices = str(last_start.get("devices", "?"))

    def cfg(self, section, key, default=None):
        try:
            return self.config.get(section, key)
        except (configparser.Error, KeyError):
            return default

    def share_limits(self):
        """(max data share, max comm share): watchdog.max_data_share and watchdog.max_comm_share of the
        run's config (its latest run_start), else the watchdog's defaults (an older metrics.jsonl)."""
        def limit(key, default):
            v = _float_or_none(self.cfg("watchdog", key))
            return v if v is not None and 0 < v <= 1 else default
        return (limit("max_data_share", WATCHDOG_DEFAULT_MAX_DATA_SHARE),
                limit("max_comm_share", WATCHDOG_DEFAULT_MAX_COMM_SHARE))

    def global_batch(self):
        """Images per optimizer step: train.global_batch of the run's config, else the median of
        images_per_s x step_ms over the kept steps (rounded); None when neither is known."""
        gb = num(_float_or_none(self.cfg("train", "global_batch")))
        if gb and gb > 0:
            return int(gb)
        per = [num(e.get("images_per_s")) * num(e.get("step_ms")) / 1000.0 for e in self.steps
               if num(e.get("images_per_s")) is not None and num(e.get("step_ms")) is not None]
        m = percentile(per, 50)
        return int(round(m)) if m and m >= 0.5 else None

    def test_set(self):
        """(samples, source) of the test set the run evaluated on: `samples` of its last eval record,
        and its data (data.dir, or the synthetic data's size and seed, which make the synthetic test
        split); None where unknown. Only runs that evaluated have one."""
        if not self.evals:
            return None, None
        samples = num(self.evals[-1].get("samples"))
        samples = int(samples) if samples is not None else None
        if not self.config.sections():
            return samples, None
        if str(self.cfg("data", "synthetic", "false")).strip().lower() in ("true", "1", "yes", "on"):
            dims = "x".join(str(self.cfg("data", f"synthetic_{k}", "?")) for k in ("height", "width", "channels"))
            source = (f"synthetic ({self.cfg('data', 'synthetic_samples', '?')} samples, {dims}, "
                      f"{self.cfg('data', 'synthetic_classes', '?')} classes, seed {self.cfg('run', 'seed', '?')})")
        else:
            d = (self.cfg("data", "dir") or "").strip()
            source = os.path.normpath(d) if d else None
        return samples, source

    def _keep(self):
        """The step and eval records that stand: a start that resumed from step k supersedes what
        earlier starts logged after k (those steps were done again); within what is left, the last
        record of a step number wins. Skipped (non-finite) records are kept apart: a skipped step
        keeps the number of the step that is retried."""
        kept, skipped, evals = {}, [], {}
        self.redone_steps, self.redone_s = 0, 0.0
        for si, s in enumerate(self.sessions):
            base = s.resumed_from
            if base is not None and si > 0:
                for k in [k for k in kept if k > base]:
                    self.redone_steps += 1
                    self.redone_s += (num(kept[k].get("step_ms")) or 0.0) / 1000.0
                    del kept[k]
                skipped = [r for r in skipped if (num(r.get("step")) or 0) <= base]
                evals = {k: v for k, v in evals.items() if k[1] <= base}
            for e in s.events:
                step = num(e.get("step"))
                if step is None:
                    continue
                if e["event"] == "step":
                    e["_session"] = si
                    if e.get("skipped") is True:
                        skipped.append(e)
                    else:
                        if int(step) in kept:
                            self.redone_steps += 1
                            self.redone_s += (num(kept[int(step)].get("step_ms")) or 0.0) / 1000.0
                        kept[int(step)] = e
                elif e["event"] == "eval":
                    evals[(num(e.get("epoch")) or 0, int(step))] = e
        self.steps = [kept[k] for k in sorted(kept)]
        self.skipped = skipped
        # One evaluation per epoch: the last of that epoch.
        by_epoch = {}
        for (ep, st) in sorted(evals):
            by_epoch[ep] = evals[(ep, st)]
        self.evals = [by_epoch[k] for k in sorted(by_epoch)]

    # ---- figures --------------------------------------------------------------------------------
    def rel_time(self, e):
        t = num(e.get("time"))
        return None if t is None else t - self.t_first

    def warnings(self):
        return [e for e in self.events if e["event"] == "warning"]

    def checkpoints(self):
        return [e for e in self.events if e["event"] == "checkpoint"]

    def checkpoint_lost_ms(self, c):
        """Training time a checkpoint cost: collecting the state and waiting for the previous write;
        a final, signal or budget checkpoint is also waited for."""
        lost = (num(c.get("copy_ms")) or 0.0) + (num(c.get("stall_ms")) or 0.0)
        if c.get("reason") in ("final", "signal", "budget"):
            lost += num(c.get("write_ms")) or 0.0
        return lost

    def gpu_series(self):
        """field -> rank -> [(time s, value, session)] from the NVML fields of step events (rank 0's GPU,
        or one value per rank when a field holds a list)."""
        out = {}
        for e in self.steps:
            t = self.rel_time(e)
            if t is None:
                continue
            for f, _ in GPU_FIELDS + [("gpu_memory_total_bytes", "")]:
                v = e.get(f)
                vals = v if isinstance(v, list) else [v]
                for r, x in enumerate(vals):
                    x = num(x)
                    if x is not None:
                        out.setdefault(f, {}).setdefault(r, []).append((t, x, e.get("_session")))
        return out

    def summary(self, price, spot):
        S = {"run_dir": self.dir, "label": self.label}
        steps = self.steps
        S["steps"] = int(steps[-1]["step"]) if steps else 0
        S["kept_step_records"] = len(steps)
        S["total_steps"] = num(self.last_start.get("total_steps"))
        S["world_size"] = self.sessions[-1].world_size() if self.sessions else 1
        S["devices"] = self.devices
        hosts = self.last_start.get("hosts")
        S["hosts"] = [str(h) for h in hosts] if isinstance(hosts, list) else []
        S["model"] = self.cfg("model", "name")
        S["global_batch"] = self.cfg("train", "global_batch")
        starts = [s for s in self.sessions if s.start is not None]
        S["starts"] = len(starts)
        S["restarts"] = max(len(starts) - 1, 0)
        statuses = []
        for i, s in enumerate(self.sessions):
            last = i == len(self.sessions) - 1
            if s.end is not None:
                statuses.append(str(s.end.get("status", "?")))
            elif last and self.running:
                statuses.append("running")
            else:
                statuses.append("killed" if not last else "no run_end")
        S["statuses"] = statuses
        S["preemptions"] = sum(1 for x in statuses if x == "stopped")
        S["killed"] = sum(1 for x in statuses if x in ("killed", "no run_end"))
        S["budget_stops"] = sum(1 for x in statuses if "budget" in x)
        S["running"] = self.running
        S["owner"] = self.owner
        S["redone_steps"] = self.redone_steps
        S["redone_s"] = self.redone_s
        # Time.
        S["wall_s"] = sum(s.duration_s() for s in self.sessions)
        all_t = [t for s in self.sessions for t in s.times]
        S["elapsed_s"] = (max(all_t) - min(all_t)) if all_t else 0.0
        ms = [num(e.get("step_ms")) for e in steps]
        ms = [m for m in ms if m is not None]
        S["train_s"] = sum(ms) / 1000.0
        S["step_ms_mean"] = sum(ms) / len(ms) if ms else None
        S["step_ms_p50"] = percentile(ms, 50)
        S["step_ms_p95"] = percentile(ms, 95)
        images = sum((num(e.get("images_per_s")) or 0.0) * (num(e.get("step_ms")) or 0.0) / 1000.0 for e in steps)
        S["images"] = images
        S["images_per_s"] = images / S["train_s"] if S["train_s"] > 0 else None
        # Epochs.
        epochs = {}
        for e in steps:
            ep = int(num(e.get("epoch")) or 0)
            d = epochs.setdefault(ep, {"epoch": ep, "steps": 0, "train_s": 0.0, "images": 0.0})
            d["steps"] += 1
            d["train_s"] += (num(e.get("step_ms")) or 0.0) / 1000.0
            d["images"] += (num(e.get("images_per_s")) or 0.0) * (num(e.get("step_ms")) or 0.0) / 1000.0
        for ev in self.evals:
            ep = int(num(ev.get("epoch")) or 0)
            if ep in epochs:
                epochs[ep]["test_loss"] = num(ev.get("loss"))
                epochs[ep]["top1"] = num(ev.get("top1"))
                epochs[ep]["eval_s"] = (num(ev.get("eval_ms")) or 0.0) / 1000.0
        S["epochs"] = [epochs[k] for k in sorted(epochs)]
        for e in self.skipped:  # a skipped batch is not retried: it still belongs to its epoch
            d = epochs.get(int(num(e.get("epoch")) or 0))
            if d is not None:
                d["skipped"] = d.get("skipped", 0) + 1
        spe = num(self.last_start.get("steps_per_epoch"))
        full = [d for d in S["epochs"] if spe and d["steps"] + d.get("skipped", 0) >= spe]
        S["epoch_s_mean"] = (sum(d["train_s"] + d.get("eval_s", 0.0) for d in full) / len(full)) if full else None
        # Breakdown.
        parts = {}
        for f, name in PARTS:
            parts[name] = sum(num(e.get(f)) or 0.0 for e in steps)
        total_ms = sum(ms)
        ck = self.checkpoints()
        S["checkpoints"] = len(ck)
        S["checkpoint_lost_s"] = sum(self.checkpoint_lost_ms(c) for c in ck) / 1000.0
        S["checkpoint_write_s"] = sum(num(c.get("write_ms")) or 0.0 for c in ck) / 1000.0
        S["parts_ms"] = parts
        S["shares"] = {k: (v / total_ms if total_ms > 0 else 0.0) for k, v in parts.items()}
        S["checkpoint_share"] = (S["checkpoint_lost_s"] / (S["train_s"] + S["checkpoint_lost_s"])
                                 if S["train_s"] + S["checkpoint_lost_s"] > 0 else 0.0)
        # Accuracy.
        top = [(num(e.get("top1")), int(num(e.get("epoch")) or 0)) for e in self.evals if num(e.get("top1")) is not None]
        S["evaluations"] = len(self.evals)  # one per epoch: a repeated evaluation (resume at the end) counts once
        S["final_top1"] = top[-1][0] if top else None
        S["best_top1"] = max(top)[0] if top else None
        S["best_top1_epoch"] = max(top)[1] if top else None
        S["final_test_loss"] = num(self.evals[-1].get("loss")) if self.evals else None
        losses = [num(e.get("loss")) for e in steps]
        S["final_loss"] = next((x for x in reversed(losses) if x is not None), None)
        S["nonfinite_skipped"] = len(self.skipped)
        S["nonfinite_loss_steps"] = sum(1 for x in losses if x is None)
        # GPU.
        g = self.gpu_series()
        S["gpu_fields"] = sorted(g)
        util = [v for r in g.get("gpu_util_pct", {}).values() for _, v, _ in r]
        S["gpu_util_mean_pct"] = sum(util) / len(util) if util else None
        S["gpu_util_low_share"] = (sum(1 for v in util if v < GPU_UTIL_MIN_PCT) / len(util)) if util else None
        for f, key in (("gpu_memory_used_bytes", "gpu_memory_max_bytes"), ("gpu_temperature_c", "gpu_temperature_max_c"),
                       ("gpu_power_w", "gpu_power_max_w")):
            v = [x for r in g.get(f, {}).values() for _, x, _ in r]
            S[key] = max(v) if v else None
        pw = [x for r in g.get("gpu_power_w", {}).values() for _, x, _ in r]
        S["gpu_power_mean_w"] = sum(pw) / len(pw) if pw else None
        # Cost.
        S["device_hours"] = sum(s.duration_s() * s.world_size() for s in self.sessions) / 3600.0
        S["device_unit"] = "GPU-hours" if self.devices == "cuda" else "rank-hours"
        if price is None:  # run.price_per_gpu_hour of the run's config (0: not set)
            price = num(_float_or_none(self.cfg("run", "price_per_gpu_hour"))) or None
        S["price_per_gpu_hour"] = price
        S["spot_price_per_gpu_hour"] = spot
        S["cost"] = S["device_hours"] * price if price is not None else None
        S["spot_cost"] = S["device_hours"] * spot if spot is not None else None
        # Per epoch of training done, with every overhead (start-up, evaluations, checkpoints, restarts).
        S["epochs_done"] = S["steps"] / spe if spe else None
        S["cost_per_epoch"] = S["cost"] / S["epochs_done"] if S["cost"] is not None and S["epochs_done"] else None
        S["full_epochs"] = len(full)
        # What the run itself recorded about money and budgets (run_end fields, helper runops).
        rec = {}
        for s in self.sessions:
            if s.end:
                for k, v in s.end.items():
                    if any(w in k for w in ("cost", "gpu_hours", "budget", "price")):
                        rec[k] = v
        S["recorded_budget_fields"] = rec
        w = self.warnings()
        S["warnings"] = len(w)
        kinds = {}
        for e in w:
            k = str(e.get("kind") or e.get("cause") or e.get("reason") or e.get("type") or "warning")
            kinds[k] = kinds.get(k, 0) + 1
        S["warning_kinds"] = kinds
        S["notes"] = list(self.notes)
        S["verdict"] = verdict(self, S)
        return S


def _float_or_none(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


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
    if S["gpu_util_mean_pct"] is not None and S["gpu_util_mean_pct"] < GPU_UTIL_MIN_PCT:
        problems.append(f"low GPU utilisation: {S['gpu_util_mean_pct']:.0f}% on average (under {GPU_UTIL_MIN_PCT:.0f}%): "
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
        rows.append(("GPU", f"utilisation mean {S['gpu_util_mean_pct']:.0f}% ({S['gpu_util_low_share']:.0%} of samples under {GPU_UTIL_MIN_PCT:.0f}%), "
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
        out += warning_list(run)
        out.append("")
    out += ["## Plots", ""]
    for p, title in pngs:
        out += [f"![{title}]({p})", ""]
    return "\n".join(out)


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
                ax.axhline(GPU_UTIL_MIN_PCT, color="red", ls=":", lw=1)
                ax.set_ylim(0, 105)
            ax.set_title(title)
            if ax.get_lines():
                legend(ax, fontsize=7)
        for ax in axes[1]:
            ax.set_xlabel(f"{tname} since the run's first start")
        save(fig, "gpu.png", "GPU utilisation, memory, temperature and power")
    return done


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
