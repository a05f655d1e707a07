"""The mutation run (docs/testing.md#the-mutation-run): real shards and checkpoints, seeded mutants of
them (tests/mutation/mutants.py), each through `hpctrain inspect` and a training start (shards) or a
resume (checkpoints) under the sanitizer build, each command with a hang limit. Writes a JSON summary;
exit 0 only with 0 failures.

Classes (one per mutant; the first that applies):
  hang               a command ran past its limit, or left processes behind          FAIL
  crash              a signal, a sanitizer report, heap corruption, "infinite loop closing library",
                     or an exit code hpctrain does not use (not 0, 1 or 2)            FAIL
  accepted_differs   training accepted it and what it computed differs from the original's run FAIL
  accepted_differs_unprotected  the same, but every changed byte lies where the original's format has no
                     checksum (today's shards: no metadata checksums, no fletcher32): no reader can
                     detect it; counted, listed, not a failure
  verdict_mismatch   training accepted it (same result) but inspect rejected it                 FAIL
  rejected_unnamed   rejected (exit 1 or 2) without naming the file                   FAIL
  rejected           exit 1 or 2 naming the file                                      OK
  rejected_contained rejected, after HDF5 crashed in the vetting child (reported on one line,
                     VETTING_CRASH): the crash was contained, the command itself exited cleanly     OK
  accepted_same      accepted, and training computed bitwise what it computes from the original OK
"Same result": the training run from the mutant writes a checkpoint whose every dataset (but the
config text, which names the run directory) is bitwise that of the run from the original, with the same
losses, learning rates and evaluations in metrics.jsonl. The runs read every sample: a shard run is one
step whose global batch is the whole train split, then an evaluation of the whole test split; a
checkpoint run resumes and trains one step. Each original is run twice first; the two must agree
bitwise, or the run stops (exit 3) instead of classifying."""
import argparse
import concurrent.futures
import json
import os
import platform
import shutil
import signal
import sys
import threading
import time

# mutants.py and the run_mutation_*.py modules beside this file.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mutants  # noqa: E402
from run_mutation_env import Env, FAIL_CLASSES, OK_CLASSES, log, stop_everything  # noqa: E402
from run_mutation_originals import make_originals  # noqa: E402
from run_mutation_trial import classify, crash_signs, report_lines, trial  # noqa: E402


def cpu_model():
    try:
        with open("/proc/cpuinfo") as fh:
            return next(x.split(":", 1)[1].strip() for x in fh if x.startswith("model name"))
    except (OSError, StopIteration):
        return platform.machine()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--mpiexec", default="mpirun")
    ap.add_argument("--work", required=True, help="work directory (removed and recreated)")
    ap.add_argument("--count", type=int, default=320)
    ap.add_argument("--seed", type=int, default=1)
    # A trial mostly waits (process and MPI start-up: 320 mutants took 4 min of CPU in 10 min of wall
    # time at 3 jobs on 2 cores), so twice the cores, at most 8, keeps the cores busy.
    ap.add_argument("--jobs", type=int, default=min(8, 2 * (os.cpu_count() or 1)))
    ap.add_argument("--only", default="", help="comma-separated mutant indices (reproduce a failure)")
    ap.add_argument("--keep", action="store_true", help="keep every trial's directory")
    ap.add_argument("--summary", required=True)
    ap.add_argument("--command", default="", help="the command line recorded in the summary")
    args = ap.parse_args()
    args.work, args.summary = os.path.abspath(args.work), os.path.abspath(args.summary)
    env = Env(args)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stop_everything)
    t_start = time.time()
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    originals = make_originals(env, args.work)
    log(f"originals: {', '.join(o['name'] for o in originals)} ({time.time() - t_start:.0f} s)")

    # References: each original twice, in different slots; both must be accepted and agree bitwise.
    refs = {}
    for o in originals:
        recs = [trial(env, o, os.path.join(args.work, f"ref_{o['name']}_{k}")) for k in (0, 1)]
        for rec in recs:
            for c in rec["commands"]:
                if c["rc"] != 0 or crash_signs(c["rc"], c["out"]) or c["timed_out"] or c["left"]:
                    log(c["out"][-4000:])
                    log(f"mutation run: the ORIGINAL {o['name']} fails {c['label']} (exit {c['rc']}): {c['cmd']}")
                    sys.exit(3)
        if recs[0]["digest"] is None or recs[0]["digest"] != recs[1]["digest"]:
            log(f"mutation run: two runs from the original {o['name']} differ ({recs[0]['digest_note']} / "
                f"{recs[1]['digest_note']}): the comparison would not be exact")
            sys.exit(3)
        refs[o["name"]] = recs[0]["digest"]
        for c in recs[0]["commands"]:
            slow = max(x["seconds"] for r in recs for x in r["commands"] if x["label"] == c["label"])
            env.timeouts[(o["name"], c["label"])] = int(max(60, 10 * slow))
        for k in (0, 1):
            shutil.rmtree(os.path.join(args.work, f"ref_{o['name']}_{k}"), ignore_errors=True)
        log(f"reference {o['name']}: " + ", ".join(f"{c['label']} {c['seconds']} s" for c in recs[0]["commands"]))
    t_ref = time.time()

    plan = mutants.plan(originals, args.count, args.seed)
    if args.only:
        keep = {int(x) for x in args.only.split(",")}
        plan = [m for m in plan if m.index in keep]
    by_name = {o["name"]: o for o in originals}
    results = []
    fail_dir = os.path.join(args.work, "failures")
    done = [0]

    def one(m, slot_id):
        slot = os.path.join(args.work, f"slot{slot_id}")
        rec = trial(env, by_name[m.original], slot, m)
        cls, why = classify(rec, refs[m.original], m)
        entry = dict(m.to_json(), change=rec.get("change", ""), cls=cls, why=why,
                     commands=[{k: c[k] for k in ("label", "rc", "seconds")} for c in rec["commands"]])
        if cls in FAIL_CLASSES or cls == "accepted_differs_unprotected":
            label, lines = report_lines(rec)
            entry["report_of"], entry["report"] = label, lines
            entry["reproduce"] = (f"scripts/mutation_run.sh --seed {args.seed} --count {args.count} --only {m.index} --keep")
            entry["cmds"] = [c["cmd"] for c in rec["commands"]]
        if cls in FAIL_CLASSES:
            keepdir = os.path.join(fail_dir, f"{m.index:04d}_{cls}")
            shutil.rmtree(keepdir, ignore_errors=True)
            shutil.copytree(slot, keepdir, ignore=shutil.ignore_patterns("tmp"))
            for c in rec["commands"]:
                with open(os.path.join(keepdir, f"{c['label']}.log"), "w") as fh:
                    fh.write(f"$ {c['cmd']}\n(in {slot}; exit {c['rc']}, {c['seconds']} s)\n{c['out']}")
            entry["kept"] = keepdir
        if not args.keep:
            shutil.rmtree(slot, ignore_errors=True)
        else:
            shutil.move(slot, os.path.join(args.work, f"trial{m.index:04d}"))
        with env.lock:
            done[0] += 1
            if cls in FAIL_CLASSES or done[0] % 25 == 0:
                log(f"[{done[0]}/{len(plan)}] #{m.index} {m.original} {m.kind}: {cls} ({why})")
        return entry

    free = list(range(args.jobs))
    slot_lock = threading.Lock()

    def run_one(m):
        with slot_lock:
            sid = free.pop()
        try:
            return one(m, sid)
        finally:
            with slot_lock:
                free.append(sid)
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as ex:
        results = list(ex.map(run_one, plan))
    t_end = time.time()

    counts = {c: 0 for c in FAIL_CLASSES + OK_CLASSES}
    per_kind, per_original = {}, {}
    for e in results:
        counts[e["cls"]] += 1
        per_kind.setdefault(e["kind"], {}).setdefault(e["cls"], 0)
        per_kind[e["kind"]][e["cls"]] += 1
        per_original.setdefault(e["original"], {}).setdefault(e["cls"], 0)
        per_original[e["original"]][e["cls"]] += 1
    failures = [e for e in results if e["cls"] in FAIL_CLASSES]
    summary = dict(
        command=args.command or " ".join(sys.argv), seed=args.seed, count=args.count, mutants=len(results),
        binary=env.bin, machine=dict(host=platform.node(), cpu=cpu_model(),
                                     cores=os.cpu_count(), system=platform.platform()),
        jobs=args.jobs, seconds=dict(originals_and_references=round(t_ref - t_start), mutants=round(t_end - t_ref),
                                     total=round(t_end - t_start)),
        hang_limits_s={f"{k[0]}/{k[1]}": v for k, v in sorted(env.timeouts.items())},
        counts=counts, failures_total=len(failures), per_original=per_original,
        per_kind=dict(sorted(per_kind.items())), failures=failures,
        unprotected=[e for e in results if e["cls"] == "accepted_differs_unprotected"],
        all=[{k: e[k] for k in ("index", "original", "target", "kind", "change", "cls")} for e in results])
    os.makedirs(os.path.dirname(os.path.abspath(args.summary)), exist_ok=True)
    with open(args.summary, "w") as fh:
        json.dump(summary, fh, indent=1)
    shutil.rmtree(os.path.join(args.work, "tmp"), ignore_errors=True)
    log(f"mutation run: {len(results)} mutants in {t_end - t_start:.0f} s: " +
        ", ".join(f"{k} {v}" for k, v in counts.items() if v))
    log(f"summary: {args.summary}")
    if failures:
        log(f"mutation run FAILED: {len(failures)} failures (kept under {fail_dir})")
        sys.exit(1)
    sys.exit(0)


if __name__ == "__main__":
    main()
