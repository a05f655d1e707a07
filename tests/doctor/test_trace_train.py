"""Timeline of a real 2-rank training run (--trace.enabled true): rank 0 writes one valid Chrome trace
(trace.json) with one process per rank; on every thread spans nest properly; the spans inside each step
(data, backup_buffers, forward, backward, allreduce_wait, nonfinite_check, optimizer, metrics) cover at
least 95% of the step's wall time; each bucket's allreduce appears on the communication thread with its
bucket index. Also prints the step time with tracing off and on (the overhead measurement).
Usage: test_trace_train.py [--measure N] (env: HT_BIN, HT_MPIEXEC)."""
import json
import os
import statistics
import subprocess
import sys
import tempfile

HT = os.environ["HT_BIN"]
MPIRUN = os.environ.get("HT_MPIEXEC", "mpirun")
STEPS = 12
CHILDREN = {"data", "backup_buffers", "forward", "backward", "allreduce_wait", "nonfinite_check", "optimizer",
            "metrics"}


def train(run_dir, trace, steps=STEPS, extra=()):
    args = ["--data.synthetic", "true", "--data.synthetic_samples", "1024", "--data.synthetic_height", "16",
            "--data.synthetic_width", "16", "--data.synthetic_channels", "1", "--model.name", "fmnist_cnn",
            "--train.global_batch", "32", "--train.max_steps", str(steps), "--train.epochs", "0",
            "--train.device", "cpu", "--train.threads", "1", "--train.eval", "false", "--dist.bucket_mb", "0.02",
            "--run.dir", run_dir, "--trace.enabled", "true" if trace else "false", *extra]
    cmd = [MPIRUN, "--oversubscribe", "--bind-to", "none", "-np", "2", HT, "train", *args]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240)
    if p.returncode != 0:
        print(p.stdout)
        raise SystemExit(f"FAIL: {' '.join(cmd)} exited {p.returncode}")
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [r for r in map(json.loads, f) if r["event"] == "step"]


def check_trace(path):
    with open(path) as f:
        j = json.load(f)  # valid JSON
    events = j["traceEvents"]
    x = [e for e in events if e["ph"] == "X"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert sorted(names) == [0, 1], names
    assert all(names[p].startswith(f"rank {p}") for p in names), names
    for e in x:
        assert isinstance(e["ts"], int) and isinstance(e["dur"], int) and e["dur"] >= 0, e
    worst = 1.0
    for pid in (0, 1):
        mine = [e for e in x if e["pid"] == pid]
        steps = [e for e in mine if e["name"] == "step"]
        assert len(steps) == STEPS, f"rank {pid}: {len(steps)} step spans"
        # Nesting on each thread: sorted by start (longer first), each span ends inside the open parent.
        for tid in {e["tid"] for e in mine}:
            evs = sorted((e for e in mine if e["tid"] == tid), key=lambda e: (e["ts"], -e["dur"]))
            stack = []
            for e in evs:
                b, end = e["ts"], e["ts"] + e["dur"]
                while stack and stack[-1][1] <= b:
                    stack.pop()
                assert not stack or end <= stack[-1][1], f"rank {pid}: {e['name']} overlaps {stack[-1][2]}"
                stack.append((b, end, e["name"]))
        main_tid = steps[0]["tid"]
        for st in steps:
            b, end = st["ts"], st["ts"] + st["dur"]
            kids = [e for e in mine if e["tid"] == main_tid and e["name"] in CHILDREN and b <= e["ts"]
                    and e["ts"] + e["dur"] <= end]
            assert {k["name"] for k in kids} == CHILDREN, f"rank {pid} step {st['args']}: {sorted({k['name'] for k in kids})}"
            cov = sum(k["dur"] for k in kids) / max(st["dur"], 1)
            worst = min(worst, cov)
            assert cov >= 0.95, f"rank {pid} step {st['args']['index']}: children cover {cov:.1%} of {st['dur']} us"
        ar = [e for e in mine if e["name"] == "allreduce"]
        assert ar and all(e["tid"] != main_tid for e in ar), "bucket allreduce spans missing or on the main thread"
        nb = max(e["args"]["index"] for e in ar) + 1
        assert nb >= 2 and len(ar) == STEPS * nb, f"rank {pid}: {len(ar)} allreduce spans for {nb} buckets"
    return len(x), worst, nb


def main():
    tmp = tempfile.mkdtemp(prefix="ht_trace_train_")
    d = os.path.join(tmp, "on")
    on = train(d, True)
    n, worst, nb = check_trace(os.path.join(d, "trace.json"))
    print(f"trace.json: {n} spans, 2 ranks, {nb} buckets/step, nesting ok, worst step coverage {worst:.1%}")
    if "--measure" in sys.argv:
        reps = int(sys.argv[sys.argv.index("--measure") + 1])
        res = {"off": [], "on": []}
        for r in range(reps):
            for mode in ("off", "on"):
                s = train(os.path.join(tmp, f"{mode}{r}"), mode == "on", steps=60)
                res[mode].append(statistics.median(x["step_ms"] for x in s[5:]))
        off, on_ = statistics.median(res["off"]), statistics.median(res["on"])
        print(json.dumps({"step_ms_median_off": off, "step_ms_median_on": on_,
                          "overhead_pct": 100 * (on_ - off) / off, "runs": res}))


if __name__ == "__main__":
    main()
