"""hpctrain report (scripts/report.py through src/cli/cmd_report.cpp; docs/report.md).
A real 2-rank run (fmnist_cnn on synthetic 28x28x1 data, 3 epochs of 8 steps, a checkpoint every 5)
started three times:
  1. a NaN injected at step 3 (one skipped step), then SIGTERM after step 9: stopped, exit 75;
  2. resumed from step 9, crashes after step 17 (injected failure, no run_end): the rerun resumes from
     the step-15 checkpoint, so steps 16 and 17 are logged twice;
  3. resumed from step 15 to the end.
The report's figures must equal what the test computes itself from metrics.jsonl (last record of a
step wins), the PNGs must be valid, GPU plots must appear exactly when NVML fields are present, two
run directories overlay, a run still going (live, and a cut last line) works, and bad RUN_DIRs or a
missing matplotlib give a clear error and the documented exit code."""
import os
import re
import struct
import sys
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ckpt"))
from common import *  # noqa: E402,F401  (run, start, metrics, check, faults, fresh_dir, finish, HT, wait_for_step)

BASE = ["--data.synthetic", "true", "--data.synthetic_samples", "256", "--data.synthetic_height", "28",
        "--data.synthetic_width", "28", "--data.synthetic_channels", "1", "--model.name", "fmnist_cnn",
        "--train.global_batch", "32", "--train.device", "cpu", "--train.log_every_steps", "1000"]
PNGS = ["loss_lr.png", "eval.png", "throughput.png", "step_breakdown.png"]


def report(*args, env=None):
    e = dict(os.environ, **(env or {}))
    p = subprocess.run([HT, "report", *args], capture_output=True, text=True, timeout=120, env=e)
    return p.returncode, p.stdout + p.stderr


def valid_png(path):
    """A complete PNG: signature, IHDR with a non-zero size, every chunk's CRC, image data, IEND."""
    try:
        with open(path, "rb") as f:
            b = f.read()
    except OSError:
        return False, "missing"
    if b[:8] != b"\x89PNG\r\n\x1a\n":
        return False, "no PNG signature"
    i, names, w, h = 8, [], 0, 0
    while i + 8 <= len(b):
        n, name = struct.unpack(">I4s", b[i:i + 8])
        data, crc = b[i + 8:i + 8 + n], b[i + 8 + n:i + 12 + n]
        if len(crc) != 4 or zlib.crc32(name + data) != struct.unpack(">I", crc)[0]:
            return False, f"bad CRC in chunk {name}"
        if name == b"IHDR":
            w, h = struct.unpack(">II", data[:8])
        names.append(name)
        i += 12 + n
    ok = names[:1] == [b"IHDR"] and b"IDAT" in names and names[-1:] == [b"IEND"] and w > 0 and h > 0
    return ok, f"{w}x{h}, {len(b)} bytes"


def events(run_dir):
    out = []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def expected(run_dir):
    """The figures computed here, independently of scripts/report.py: the last record of each step
    number wins (non-skipped records), restarts = run_start events - 1."""
    ev = events(run_dir)
    last = {}
    for e in ev:
        if e["event"] == "step" and not e["skipped"]:
            last[e["step"]] = e
    evals = [e for e in ev if e["event"] == "eval"]
    top = {}
    for e in evals:
        top[e["epoch"]] = e["top1"]  # last evaluation of an epoch
    records = [e for e in ev if e["event"] == "step" and not e["skipped"]]
    return {
        "steps": max(last) if last else 0,
        "distinct": len(last),
        "redone": len(records) - len(last),
        "restarts": sum(1 for e in ev if e["event"] == "run_start") - 1,
        "stopped": sum(1 for e in ev if e["event"] == "run_end" and e["status"] == "stopped"),
        "run_ends": sum(1 for e in ev if e["event"] == "run_end"),
        "train_s": sum(e["step_ms"] for e in last.values()) / 1000.0,
        "final_loss": last[max(last)]["loss"] if last else None,
        "final_top1": top[max(top)] if top else None,
        "best_top1": max(top.values()) if top else None,
        "skipped": sum(1 for e in ev if e["event"] == "step" and e["skipped"]),
    }


def summary(out_dir):
    with open(os.path.join(out_dir, "summary.json")) as f:
        return json.load(f)["runs"]


def near(a, b, tol=1e-9):
    return a is not None and b is not None and abs(a - b) <= tol * max(1.0, abs(b))


# ---- the preempted, crashed and resumed run --------------------------------------------------------
A = fresh_dir("a")
args = BASE + ["--train.epochs", "3", "--checkpoint.every_steps", "5", "--run.dir", A]
rc, out = run(args, np_ranks=2, env=faults(nan_at_step=3, signal_at_step=9))
check(rc == 75, f"start 1 (NaN at step 3, SIGTERM after step 9) exits 75 (got {rc})") or print(out)
rc, out = run(args, np_ranks=2, env=faults(fail_at_step=17))
check(rc != 0 and rc != 75, f"start 2 crashes after step 17 (got {rc})") or print(out)
rc, out = run(args, np_ranks=2)
check(rc == 0, f"start 3 finishes (got {rc})") or print(out)
x = expected(A)
# 3 epochs of 8 batches; the skipped batch is not retried, so 23 optimizer steps.
check(x["steps"] == 24 - x["skipped"] and x["restarts"] == 2 and x["redone"] > 0 and x["skipped"] == 1 and x["run_ends"] == 2,
      f"metrics.jsonl holds the story: {x['steps']} steps, {x['restarts']} restarts, {x['redone']} steps logged twice, "
      f"{x['skipped']} skipped, {x['run_ends']} run_end")

OUT_A = os.path.join(TMP, "report_a")
rc, out = report(A, "--out", OUT_A, "--price-per-gpu-hour", "3", "--spot-price-per-gpu-hour", "1")
check(rc == 0, f"report exits 0 (got {rc})") or print(out)
for p in PNGS:
    ok, why = valid_png(os.path.join(OUT_A, p))
    check(ok, f"{p} is a valid, non-empty PNG ({why})")
check(not os.path.exists(os.path.join(OUT_A, "gpu.png")), "no gpu.png without NVML fields")
S = summary(OUT_A)[0]
check(S["steps"] == x["steps"] and S["kept_step_records"] == x["distinct"], f"steps {S['steps']} / {S['kept_step_records']} records "
      f"(want {x['steps']} / {x['distinct']})")
check(S["restarts"] == x["restarts"], f"restarts {S['restarts']} (want {x['restarts']})")
check(S["preemptions"] == x["stopped"] == 1 and S["killed"] == 1, f"1 preemption, 1 killed start (got {S['preemptions']}, {S['killed']}; "
      f"statuses {S['statuses']})")
check(S["statuses"] == ["stopped", "killed", "finished"], f"statuses in order {S['statuses']}")
check(S["redone_steps"] == x["redone"], f"steps done again {S['redone_steps']} (want {x['redone']})")
check(near(S["train_s"], x["train_s"]), f"step time summed over the last record of each step: {S['train_s']:.6f} s "
      f"(want {x['train_s']:.6f}; every record would give more)")
check(near(S["final_loss"], x["final_loss"]), f"final training loss {S['final_loss']} (want {x['final_loss']})")
check(near(S["final_top1"], x["final_top1"]) and near(S["best_top1"], x["best_top1"]),
      f"final/best top-1 {S['final_top1']}/{S['best_top1']} (want {x['final_top1']}/{x['best_top1']})")
check(S["nonfinite_skipped"] == x["skipped"], f"non-finite skipped steps {S['nonfinite_skipped']} (want {x['skipped']})")
ev = events(A)
# GPU-hours: ranks x seconds of each start (first to last event, at least run_end's wall_s), computed here.
sess, cur = [], None
for e in ev:
    if e["event"] == "resume" or (e["event"] == "run_start" and not (cur and cur[-1]["event"] == "resume")):
        cur = []
        sess.append(cur)
    cur.append(e)
dh = 0.0
for s in sess:
    d = max(e["time"] for e in s) - min(e["time"] for e in s)
    d = max([d] + [e["wall_s"] for e in s if e["event"] == "run_end"])
    dh += 2 * d / 3600.0
check(len(sess) == 3 and near(S["device_hours"], dh, 1e-6), f"rank-hours {S['device_hours']:.6f} (want {dh:.6f})")
check(near(S["cost"], 3 * dh, 1e-6) and near(S["spot_cost"], dh, 1e-6), f"cost {S['cost']:.6f} on demand, {S['spot_cost']:.6f} spot")
md = open(os.path.join(OUT_A, "report.md")).read()
check(f"| restarts | {x['restarts']} (preemptions/stops 1, killed or crashed 1" in md, "report.md: restarts row")
check(f"| steps | {x['steps']} of 24 |" in md, "report.md: steps row")
check(f"final {x['final_top1']:.4f}, best {x['best_top1']:.4f}" in md, "report.md: top-1 row")
check(("**Healthy.**" in md) != ("**Not healthy.**" in md), "report.md has one verdict")
check("1 step(s) skipped for a non-finite loss" in md, "the verdict mentions the skipped step")
check(all(f"]({p})" in md for p in PNGS), "report.md shows every plot")
rc, out = report(A)
check(rc == 0 and os.path.isfile(os.path.join(A, "report", "report.md")), "default --out is RUN_DIR/report")

# ---- NVML fields faked into a copy -----------------------------------------------------------------
G = fresh_dir("gpu")
os.makedirs(G)
util = []
with open(os.path.join(A, "metrics.jsonl")) as f, open(os.path.join(G, "metrics.jsonl"), "w") as g:
    for i, line in enumerate(f):
        e = json.loads(line)
        if e["event"] == "step":
            u = 30.0 + (i % 20)
            e.update(gpu_util_pct=u, gpu_mem_util_pct=20.0, gpu_memory_used_bytes=3 * 2**30 + i,
                     gpu_memory_total_bytes=80 * 2**30, gpu_temperature_c=50.0 + i % 7, gpu_power_w=200.0 + i)
        g.write(json.dumps(e) + "\n")
OUT_G = os.path.join(TMP, "report_gpu")
rc, out = report(G, "--out", OUT_G)
check(rc == 0, f"report on the NVML copy exits 0 (got {rc})") or print(out)
ok, why = valid_png(os.path.join(OUT_G, "gpu.png"))
check(ok, f"gpu.png appears with NVML fields ({why})")
Sg = summary(OUT_G)[0]
ev_g = events(G)
last_u = {}
for e in ev_g:
    if e["event"] == "step" and not e["skipped"]:
        last_u[e["step"]] = e["gpu_util_pct"]
want_u = sum(last_u.values()) / len(last_u)
check(near(Sg["gpu_util_mean_pct"], want_u), f"mean GPU utilisation {Sg['gpu_util_mean_pct']} (want {want_u})")
md_g = open(os.path.join(OUT_G, "report.md")).read()
check("**Not healthy.**" in md_g and "low GPU utilisation" in md_g, "30-49% utilisation makes the verdict 'not healthy: low GPU utilisation'")
check("low GPU utilisation" not in md, "no GPU utilisation verdict without NVML fields")
check(Sg["gpu_util_min_pct"] == 70, f"the run's watchdog.min_gpu_util_pct (70) is the limit (got {Sg['gpu_util_min_pct']})")

# The limit is the run's own (watchdog.min_gpu_util_pct in run_start's config), as the watchdog's.
G25 = fresh_dir("gpu25")
os.makedirs(G25)
with open(os.path.join(G, "metrics.jsonl")) as f, open(os.path.join(G25, "metrics.jsonl"), "w") as g:
    for line in f:
        e = json.loads(line)
        if e["event"] == "run_start":
            cfg, n = re.subn(r"(?m)^min_gpu_util_pct\s*=.*$", "min_gpu_util_pct = 25", e["config"])
            check(n == 1, "run_start's config carries watchdog.min_gpu_util_pct")
            e["config"] = cfg
        g.write(json.dumps(e) + "\n")
OUT_G25 = os.path.join(TMP, "report_gpu25")
rc, out = report(G25, "--out", OUT_G25)
S25 = summary(OUT_G25)[0]
md_g25 = open(os.path.join(OUT_G25, "report.md")).read()
check(rc == 0 and S25["gpu_util_min_pct"] == 25 and S25["gpu_util_low_share"] == 0,
      f"with watchdog.min_gpu_util_pct 25 the limit is 25 and no sample is under it (got {S25.get('gpu_util_min_pct')}, "
      f"{S25.get('gpu_util_low_share')})") or print(out)
check("low GPU utilisation" not in md_g25, "30-49% utilisation is no problem under the run's own 25% limit")

# ---- watchdog warnings and a budget stop (fields of the runops helper), faked into a copy ---------
W = fresh_dir("warn")
os.makedirs(W)
with open(os.path.join(A, "metrics.jsonl")) as f, open(os.path.join(W, "metrics.jsonl"), "w") as g:
    lines = f.readlines()
    for line in lines[:-1]:
        g.write(line)
    t = json.loads(lines[-1])["time"]
    for k, kind in enumerate(["data_loading", "data_loading", "slow_rank"]):
        g.write(json.dumps({"event": "warning", "source": "watchdog", "time": t + k, "first_step": 10 + k, "step": 20 + k,
                            "kind": kind, "message": f"warning number {k}", "knob": "data.prefetch"}) + "\n")
    end = json.loads(lines[-1])
    end.update(status="budget", exit_code=3, wall_hours=0.01, gpu_hours=0.02, cost=1.25, price_per_gpu_hour=62.5)
    g.write(json.dumps(end) + "\n")
OUT_W = os.path.join(TMP, "report_warn")
rc, out = report(W, "--out", OUT_W)
Sw = summary(OUT_W)[0] if rc == 0 else {}
check(rc == 0 and Sw["warnings"] == 3 and Sw["warning_kinds"] == {"data_loading": 2, "slow_rank": 1},
      f"3 warnings counted by kind ({Sw.get('warning_kinds')})") or print(out)
md_w = open(os.path.join(OUT_W, "report.md")).read() if rc == 0 else ""
check("### Warnings (3)" in md_w and "| 12-22 | slow_rank | warning number 2 | data.prefetch |" in md_w, "report.md lists the warnings")
check("divergent ranks" in md_w, "a slow_rank warning makes the verdict name divergent ranks")
check(Sw.get("budget_stops") == 1 and Sw.get("recorded_budget_fields", {}).get("cost") == 1.25, "the budget stop and its cost are shown")

# ---- two run directories overlay -------------------------------------------------------------------
OUT_2 = os.path.join(TMP, "report_ab")
rc, out = report(A, G, "--out", OUT_2)
check(rc == 0, f"report A G exits 0 (got {rc})") or print(out)
S2 = summary(OUT_2) if rc == 0 else []
check([s["label"] for s in S2] == ["a", "gpu"], f"two runs labelled by directory ({[s['label'] for s in S2]})")
for p in PNGS + ["gpu.png"]:
    ok, why = valid_png(os.path.join(OUT_2, p))
    check(ok, f"overlay {p} ({why})")
md2 = open(os.path.join(OUT_2, "report.md")).read() if rc == 0 else ""
check("| | a | gpu |" in md2 and "## a" in md2 and "## gpu" in md2, "report.md compares both runs side by side")

# ---- a run still going: a cut last line, and a live run ---------------------------------------------
C = fresh_dir("cut")
os.makedirs(C)
with open(os.path.join(A, "metrics.jsonl")) as f:
    lines = f.readlines()
with open(os.path.join(C, "metrics.jsonl"), "w") as g:
    g.writelines(lines[:-3])
    g.write(lines[-3][: len(lines[-3]) // 2])  # a line being written
xc = expected(C)
OUT_C = os.path.join(TMP, "report_cut")
rc, out = report(C, "--out", OUT_C)
Sc = summary(OUT_C)[0] if rc == 0 else {}
check(rc == 0 and Sc["steps"] == xc["steps"] and Sc["restarts"] == 2, f"a cut last line is ignored: exit {rc}, steps {Sc.get('steps')} (want {xc['steps']})") or print(out)
check(any("incomplete" in n for n in Sc.get("notes", [])), "the summary notes the incomplete last line")

J = fresh_dir("just_started")
os.makedirs(J)
with open(os.path.join(J, "metrics.jsonl"), "w") as g:
    g.write(next(l for l in lines if json.loads(l)["event"] == "run_start"))
rc, out = report(J, "--out", os.path.join(TMP, "report_just"))
Sj = summary(os.path.join(TMP, "report_just"))[0] if rc == 0 else {}
check(rc == 0 and Sj["steps"] == 0 and Sj["verdict"]["healthy"] is None and "too early to tell" in out,
      f"a run with run_start only: exit {rc}, verdict {Sj.get('verdict')}") or print(out)

L = fresh_dir("live")
p = start(BASE + ["--train.epochs", "200", "--checkpoint.every_steps", "1000", "--run.dir", L], np_ranks=2)
if check(wait_for_step(L, 3, p, timeout=90), "live run reached step 3"):
    rc, out = report(L, "--out", os.path.join(TMP, "report_live"))
    Sl = summary(os.path.join(TMP, "report_live"))[0] if rc == 0 else {}
    check(rc == 0 and Sl["statuses"] == ["running"] and Sl["steps"] >= 3,
          f"report on a live run: exit {rc}, statuses {Sl.get('statuses')}, steps {Sl.get('steps')}") or print(out)
p.send_signal(signal.SIGUSR1)
try:
    p.communicate(timeout=60)
except subprocess.TimeoutExpired:
    os.killpg(p.pid, signal.SIGKILL)

# ---- bad input ---------------------------------------------------------------------------------------
rc, out = report(os.path.join(TMP, "no_such_run"))
check(rc == 2 and "no_such_run: no such directory" in out, f"missing RUN_DIR: exit {rc}: {out.strip()[:160]}")
E = fresh_dir("empty")
os.makedirs(E)
rc, out = report(E)
check(rc == 2 and "metrics.jsonl: no such file" in out, f"RUN_DIR without metrics.jsonl: exit {rc}: {out.strip()[:160]}")
B = fresh_dir("garbage")
os.makedirs(B)
with open(os.path.join(B, "metrics.jsonl"), "wb") as f:
    f.write(b"\x00\xffnot json\n{\"no_event\": 1}\n[1,2]\n")
rc, out = report(B)
check(rc == 2 and "metrics.jsonl: no metrics events (3 unreadable line(s))" in out, f"garbage metrics.jsonl: exit {rc}: {out.strip()[:160]}")
rc, out = report(A, "--price-per-gpu-hour", "-2")
check(rc == 2 and "--price-per-gpu-hour" in out, f"negative price: exit {rc}")
NOMPL = os.path.join(TMP, "no_matplotlib")
os.makedirs(os.path.join(NOMPL, "matplotlib"))
with open(os.path.join(NOMPL, "matplotlib", "__init__.py"), "w") as f:
    f.write("raise ImportError('No module named matplotlib')\n")
rc, out = report(A, "--out", os.path.join(TMP, "r_nompl"), env={"PYTHONPATH": NOMPL})
check(rc == 1 and "matplotlib is not available" in out and "python3-matplotlib" in out,
      f"matplotlib missing: exit {rc}: {out.strip()[:200]}")
check(not os.path.exists(os.path.join(TMP, "r_nompl", "report.md")), "nothing written without matplotlib")
finish()
