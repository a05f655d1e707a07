"""scripts/report.py: one run directory (Run) and the figures of its summary (summary.json)."""
import configparser
import os

from report_events import (
    GPU_FIELDS, PARTS, WATCHDOG_DEFAULT_MAX_COMM_SHARE, WATCHDOG_DEFAULT_MAX_DATA_SHARE, WATCHDOG_DEFAULT_MIN_GPU_UTIL_PCT,
    num, owner_running, percentile, read_events, split_sessions)
from report_verdict import verdict


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

    def gpu_util_limit(self):
        """watchdog.min_gpu_util_pct of the run's config (its latest run_start), else the watchdog's
        default (an older metrics.jsonl)."""
        v = _float_or_none(self.cfg("watchdog", "min_gpu_util_pct"))
        return v if v is not None and 0 <= v <= 100 else WATCHDOG_DEFAULT_MIN_GPU_UTIL_PCT

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

    def restarts_inside(self):
        """slurm/train.sbatch's relaunches after a failure (`restart` events), each with what it cost:
        `lost_s` from the last step before the failure until a step past it was logged again
        (detection, relaunch, start-up and the steps redone); None while none has been."""
        out = []
        for i, e in enumerate(self.events):
            if e["event"] != "restart":
                continue
            r = dict(e)
            before = [x for x in self.events[:i] if x["event"] == "step" and num(x.get("time")) is not None]
            last = num(e.get("last_step"))
            past = [x for x in self.events[i + 1:] if x["event"] == "step" and num(x.get("time")) is not None
                    and last is not None and num(x.get("step")) is not None and x["step"] > last]
            r["lost_s"] = num(past[0]["time"]) - num(before[-1]["time"]) if before and past else None
            out.append(r)
        return out

    def checkpoints(self):
        return [e for e in self.events if e["event"] == "checkpoint"]

    def checkpoint_lost_ms(self, c):
        """Training time a checkpoint cost: collecting the state and waiting for the previous write;
        a final, signal or budget checkpoint is also waited for."""
        lost = (num(c.get("copy_ms")) or 0.0) + (num(c.get("stall_ms")) or 0.0)
        if c.get("reason") in ("final", "signal", "budget", "slow_rank"):
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
        S["gpu_util_min_pct"] = self.gpu_util_limit()
        S["gpu_util_low_share"] = (sum(1 for v in util if v < S["gpu_util_min_pct"]) / len(util)) if util else None
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
