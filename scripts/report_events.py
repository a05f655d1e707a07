"""scripts/report.py: its thresholds and limits, and reading a run directory's metrics.jsonl into
events and starts (sessions)."""
import errno
import fcntl
import json
import math
import os


EXIT_OK, EXIT_RUNTIME, EXIT_USAGE = 0, 1, 2

# Verdict thresholds (docs/report.md#verdict): shares of the summed step time over the kept steps.
# Data-bound, communication-bound and low GPU utilisation use the run's own watchdog limits,
# watchdog.max_data_share, watchdog.max_comm_share and watchdog.min_gpu_util_pct of the config in its
# run_start event (Run.share_limits, Run.gpu_util_limit), so the report and the watchdog
# (src/train/watchdog.cpp) judge alike. These are the watchdog's defaults (src/train/config.hpp,
# Config::Watchdog), used only for a metrics.jsonl whose run_start lacks them.
WATCHDOG_DEFAULT_MAX_DATA_SHARE = 0.3   # waiting for data above this: data-bound
WATCHDOG_DEFAULT_MAX_COMM_SHARE = 0.5   # exposed allreduce above this: communication-bound
WATCHDOG_DEFAULT_MIN_GPU_UTIL_PCT = 70.0  # mean GPU utilisation below this: the GPU idles
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
