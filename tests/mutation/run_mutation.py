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
import hashlib
import json
import os
import platform
import re
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mutants  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
FAIL_CLASSES = ("hang", "crash", "accepted_differs", "verdict_mismatch", "rejected_unnamed")
OK_CLASSES = ("rejected", "rejected_contained", "accepted_same", "accepted_differs_unprotected")
# The line with which hpctrain reports a crash of its vetting child (src/train/file_vetting.cpp): the
# crash happened in that child, which is what it is for; the process itself carried on and exited cleanly.
VETTING_CRASH = "in the vetting process `hpctrain verify`"
CRASH_PATTERNS = ["AddressSanitizer", "LeakSanitizer", "UndefinedBehaviorSanitizer", ": runtime error:",
                  "infinite loop closing library", "Segmentation fault", "double free", "free(): ", "malloc(): ",
                  "corrupted size", "stack smashing", "terminate called", "core dumped", "exited on signal",
                  "Caught signal", "Signal code", "Bus error", "Aborted"]
CONFIG_TEXT = ("strings/config", "strings/config_hash")

COMMON = ["--train.device", "cpu", "--data.crop_padding", "0", "--data.flip", "false", "--train.log_every_steps", "1",
          "--checkpoint.keep_last", "100", "--run.seed", "7", "--train.threads", "1"]
# Shard runs: mlp (every pixel reaches the first layer's output and gradient), one step over the whole
# train split (64 samples), then the whole test split evaluated, then the final checkpoint.
SHARD_TRAIN = COMMON + ["--model.name", "mlp", "--train.global_batch", "64", "--train.epochs", "0",
                        "--train.max_steps", "1", "--train.eval", "true"]
# Checkpoint runs: fmnist_cnn (batch norm: buffers and per-rank buffers), 16 per step, 4 steps per epoch.
CKPT_TRAIN = COMMON + ["--model.name", "fmnist_cnn", "--train.global_batch", "16", "--train.epochs", "0",
                       "--train.eval", "false", "--checkpoint.every_steps", "1"]


def log(*a):
    print(*a, flush=True)


class Env:
    def __init__(self, args):
        self.bin = os.path.abspath(args.bin)
        self.mpiexec = args.mpiexec
        self.env = dict(os.environ)
        self.env.update({
            "OMP_NUM_THREADS": "1", "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
            "OMPI_MCA_rmaps_base_oversubscribe": "1", "OMPI_MCA_btl": "self,vader",
            "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
            # Sanitizers: reports are fatal and have their own exit codes; ASan keeps its SIGSEGV handler
            # (Open MPI's would print a short trace and could hang). Leak checking is off: Open MPI 4.1
            # leaves ~3,300 allocations (117 KB) at exit even for `inspect`, from components it has
            # already unloaded, so their stacks read "<unknown module>" and cannot be suppressed by
            # library. Leaked HDF5 identifiers are still caught: HDF5 then prints "infinite loop
            # closing library" at exit, which counts as a crash here.
            "ASAN_OPTIONS": "detect_leaks=0:exitcode=86:allow_user_segv_handler=0:handle_abort=1:"
                            "check_initialization_order=1",
            "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1:exitcode=87",
        })
        self.env.pop("HT_TEST_FAULTS", None)
        self.timeouts = {}
        self.lock = threading.Lock()


def session_pids(sid):
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as fh:
                st = fh.read()
        except OSError:
            continue
        fields = st[st.rfind(")") + 2:].split()
        if int(fields[3]) == sid and fields[0] != "Z":
            out.append(int(d))
    return out


def kill_session(sid):
    for _ in range(50):
        pids = session_pids(sid)
        if not pids:
            return
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.05)


ACTIVE = set()  # session ids of the commands running now (killed if the run itself is stopped)


def stop_everything(signum, frame):
    for sid in list(ACTIVE):
        kill_session(sid)
    log(f"mutation run: stopped by signal {signum}; every command's processes killed")
    os._exit(128 + signum)


def run_cmd(env, cmd, timeout, cwd, tmpdir):
    """Runs cmd in its own session: (rc, output, seconds, timed_out, leftover process count)."""
    e = dict(env.env, TMPDIR=tmpdir)
    t0 = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=cwd, env=e, start_new_session=True)
    ACTIVE.add(p.pid)
    timed_out = False
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        kill_session(p.pid)
        out, _ = p.communicate()
    dur = time.time() - t0
    left = session_pids(p.pid)
    if left:
        time.sleep(0.5)  # processes that are only just exiting
        left = session_pids(p.pid)
        kill_session(p.pid)
    ACTIVE.discard(p.pid)
    return p.returncode, out.decode("utf-8", "replace"), dur, timed_out, len(left)


# ---- originals ----------------------------------------------------------------------------------
def write_idx(d, rng):
    os.makedirs(d, exist_ok=True)
    for name, n in (("train", 64), ("t10k", 32)):
        img = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        lab = rng.integers(0, 10, n).astype(np.uint8)
        with open(os.path.join(d, f"{name}-images-idx3-ubyte"), "wb") as f:
            f.write(struct.pack(">IIII", 0x803, n, 28, 28) + img.tobytes())
        with open(os.path.join(d, f"{name}-labels-idx1-ubyte"), "wb") as f:
            f.write(struct.pack(">II", 0x801, n) + lab.tobytes())


def write_legacy(src_dir, dst_dir):
    """The shards of src_dir rewritten as hpctrain wrote them before metadata checksums: HDF5's earliest
    file format, variable-length strings, int32 attributes, no filters (kept so that the run still
    covers today's shards after the writer changes)."""
    os.makedirs(dst_dir, exist_ok=True)
    for name in sorted(os.listdir(src_dir)):
        with h5py.File(os.path.join(src_dir, name), "r") as s, h5py.File(os.path.join(dst_dir, name), "w", libver="earliest") as d:
            img, lab = s["images"][...], s["labels"][...]
            d.create_dataset("images", data=img, chunks=(min(len(img), 83),) + img.shape[1:])
            d.create_dataset("labels", data=lab.astype(np.int32))

            def text(v):
                return v.decode() if isinstance(v, bytes) else str(v)
            a = s.attrs
            d.attrs["format"] = "hpctrain-dataset"
            d.attrs["version"] = np.int32(1)
            d.attrs["split"] = text(a["split"])
            for k in ("shard_index", "num_shards", "num_classes", "height", "width", "channels"):
                d.attrs[k] = np.int32(int(a[k]))
            d.attrs["class_names"] = np.array([text(x) for x in a["class_names"]], dtype=h5py.string_dtype())
            d.attrs["mean"] = np.asarray(a["mean"], np.float32).reshape(-1)
            d.attrs["std"] = np.asarray(a["std"], np.float32).reshape(-1)
            d.attrs["source"] = text(a["source"]) if "source" in a else "mutation run"


def make_originals(env, root):
    """Shard sets (prepare, prepare --gzip, legacy) and checkpoints (2-rank run: steps 2 and 5, version 2;
    1-rank run: step 3, version 1). Returns the originals list for mutants.plan."""
    orig = os.path.join(root, "originals")
    shutil.rmtree(orig, ignore_errors=True)
    os.makedirs(orig)
    tmp = os.path.join(root, "tmp")
    os.makedirs(tmp, exist_ok=True)
    write_idx(os.path.join(orig, "idx"), np.random.default_rng(12))

    def must(cmd, what):
        rc, out, dur, to, left = run_cmd(env, cmd, 600, orig, tmp)
        if rc != 0 or to or left:
            log(out)
            raise SystemExit(f"mutation run: making the originals failed ({what}, exit {rc})")
        return out
    for name, extra in (("prepare", []), ("prepare_gzip", ["--gzip", "4"])):
        must([env.bin, "prepare", "--format", "fashion-mnist", "--input", "idx", "--output", name, "--shards", "2"] + extra,
             name)
    write_legacy(os.path.join(orig, "prepare"), os.path.join(orig, "legacy"))
    mpi = [env.mpiexec, "--oversubscribe", "--bind-to", "none", "-np"]
    must(mpi + ["2", env.bin, "train"] + CKPT_TRAIN + ["--train.max_steps", "5", "--data.dir", "prepare", "--run.dir", "run_np2"],
         "2-rank run")
    must(mpi + ["1", env.bin, "train"] + CKPT_TRAIN + ["--train.max_steps", "3", "--data.dir", "prepare", "--run.dir", "run_np1"],
         "1-rank run")
    out = []
    for name, w in (("prepare", 0.22), ("prepare_gzip", 0.13), ("legacy", 0.2)):
        d = os.path.join(orig, name)
        out.append(dict(name=name, type="shards", dir=d, weight=w, files=[os.path.join(d, f) for f in sorted(os.listdir(d))]))
    for run, step, np_, w in (("run_np2", 2, 2, 0.17), ("run_np2", 5, 2, 0.16), ("run_np1", 3, 1, 0.12)):
        p = os.path.join(orig, run, "checkpoints", "step-%08d.h5" % step)
        keep = os.path.join(orig, "ckpt_%s_step%d.h5" % (run, step))
        shutil.copyfile(p, keep)
        out.append(dict(name=f"ckpt_np{np_}_step{step}", type="checkpoint", files=[keep], weight=w, step=step, ranks=np_,
                        data=os.path.join(orig, "prepare")))
    return out


# ---- one trial: an original or a mutant through inspect and training ----------------------------------
def digest_run(run_dir):
    """What training computed: every dataset of the newest checkpoint but the config text, and the
    step/eval/resume records of the last run in metrics.jsonl. None when there is no checkpoint."""
    ck = os.path.join(run_dir, "checkpoints")
    files = sorted(f for f in os.listdir(ck) if re.fullmatch(r"step-\d{8}\.h5", f)) if os.path.isdir(ck) else []
    if not files:
        return None, "no checkpoint written"
    h = hashlib.sha256()
    h.update(files[-1].encode())
    with h5py.File(os.path.join(ck, files[-1]), "r") as f:
        items = []
        f.visititems(lambda n, o: items.append(n) if isinstance(o, h5py.Dataset) else None)
        for n in sorted(items):
            if n in CONFIG_TEXT:
                continue
            a = f[n][...]
            h.update(f"{n}|{a.dtype.str}|{a.shape}|".encode() + a.tobytes())
        for k in sorted(f.attrs):
            h.update(f"@{k}={f.attrs[k]!r}".encode())
    recs = []
    with open(os.path.join(run_dir, "metrics.jsonl")) as fh:
        for line in fh:
            j = json.loads(line)
            if j.get("event") == "run_start":
                recs = []
            if j.get("event") in ("step", "eval", "resume"):
                recs.append({k: j.get(k) for k in ("event", "step", "epoch", "loss", "lr", "top1", "skipped", "from_step")})
    h.update(json.dumps(recs, sort_keys=True).encode())
    return h.hexdigest(), f"{files[-1]}, {len(recs)} records"


def commands(env, o, slot, target_name):
    """[(label, cmd)] of a trial in slot (paths inside the slot are the same for every trial)."""
    mpi = [env.mpiexec, "--oversubscribe", "--bind-to", "none", "-np"]
    if o["type"] == "shards":
        return [("inspect_file", [env.bin, "inspect", os.path.join("data", target_name)]),
                ("inspect_dir", [env.bin, "inspect", "--validate", "data"]),
                ("train", mpi + ["2", env.bin, "train"] + SHARD_TRAIN + ["--data.dir", "data", "--run.dir", "run"])]
    ck = os.path.join("run", "checkpoints", "step-%08d.h5" % o["step"])
    return [("inspect_file", [env.bin, "inspect", ck]),
            ("train", mpi + [str(o["ranks"]), env.bin, "train"] + CKPT_TRAIN +
             ["--train.max_steps", str(o["step"] + 1), "--data.dir", o["data"], "--run.dir", "run"])]


def crash_signs(rc, out):
    """Signs that the command itself crashed; a vetting child's crash, reported on one line by the
    command (VETTING_CRASH), is not one."""
    own = "\n".join(line for line in out.splitlines() if VETTING_CRASH not in line)
    signs = [p for p in CRASH_PATTERNS if p in own]
    if rc not in (0, 1, 2):
        signs.append(f"exit code {rc}")
    return signs


def trial(env, o, slot, mutant=None):
    """Sets up slot with the original (or the mutant of it), runs the commands; returns a record."""
    shutil.rmtree(slot, ignore_errors=True)
    os.makedirs(os.path.join(slot, "tmp"))
    target = mutant.target if mutant else o["files"][0]
    name = os.path.basename(target) if o["type"] == "shards" else "step-%08d.h5" % o["step"]
    if o["type"] == "shards":
        dst_dir = os.path.join(slot, "data")
        os.makedirs(dst_dir)
        for f in o["files"]:
            if f != target or not mutant:
                shutil.copyfile(f, os.path.join(dst_dir, os.path.basename(f)))
    else:
        dst_dir = os.path.join(slot, "run", "checkpoints")
        os.makedirs(dst_dir)
        if not mutant:
            shutil.copyfile(target, os.path.join(dst_dir, name))
        with open(os.path.join(slot, "run", "LATEST"), "w") as fh:
            fh.write(f"checkpoints/{name}\n")
    rec = {}
    if mutant:
        try:
            rec["change"] = mutants.apply(mutant, os.path.join(dst_dir, name), os.path.join(slot, "side"))
        except Exception as ex:  # a generator bug must not pass as a product result
            raise RuntimeError(f"mutant {mutant.index} ({mutant.kind}): the generator failed: {ex!r}")
    res = []
    for label, cmd in commands(env, o, slot, name):
        limit = env.timeouts.get((o["name"], label), 600)
        rc, out, dur, to, left = run_cmd(env, cmd, limit, slot, os.path.join(slot, "tmp"))
        res.append(dict(label=label, rc=rc, seconds=round(dur, 2), timed_out=to, left=left, out=out,
                        limit=limit, cmd=" ".join(cmd)))
    rec["commands"] = res
    train = res[-1]
    rec["digest"], rec["digest_note"] = digest_run(os.path.join(slot, "run")) if train["rc"] == 0 else (None, "")
    rec["named"] = name
    return rec


def classify(rec, ref_digest, mutant):
    """(class, reason) of a mutant's record."""
    for c in rec["commands"]:
        if c["timed_out"]:
            return "hang", f"{c['label']} ran past {c['limit']} s"
        if c["left"]:
            return "hang", f"{c['label']} left {c['left']} processes behind"
    for c in rec["commands"]:
        signs = crash_signs(c["rc"], c["out"])
        if signs:
            return "crash", f"{c['label']}: {', '.join(signs)}"
    train = rec["commands"][-1]
    checker = next(c for c in rec["commands"] if c["label"] == ("inspect_dir" if len(rec["commands"]) == 3 else "inspect_file"))
    if train["rc"] == 0:
        if rec["digest"] != ref_digest:
            if mutant.protected is False:
                return "accepted_differs_unprotected", "training accepted it and computed something else; no checksum covers the changed bytes"
            return "accepted_differs", f"training accepted it and computed something else ({rec['digest_note']})"
        if checker["rc"] != 0:
            return "verdict_mismatch", f"training accepted it (same result) but {checker['label']} exited {checker['rc']}"
        return "accepted_same", "same result as the original"
    # Named: the file, or (a rejection of the whole set in the light of the config, e.g. too few
    # samples for the global batch) the dataset or run directory it lies in.
    where = ("data.dir = data", "data/", "data (split") if len(rec["commands"]) == 3 else ("run/checkpoints",)
    for c in rec["commands"]:
        if c["rc"] != 0 and rec["named"] not in c["out"] and not any(w in c["out"] for w in where):
            return "rejected_unnamed", f"{c['label']} exited {c['rc']} without naming {rec['named']}"
    if any(VETTING_CRASH in c["out"] for c in rec["commands"]):
        return "rejected_contained", f"HDF5 crashed in the vetting child; training exited {train['rc']}"
    return "rejected", f"training exited {train['rc']}"


TELLING = re.compile(r"hpctrain: |error|warning|fatal|done: |stopped|Signal:|Sanitizer|HDF5|mpirun (noticed|detected)")


def report_lines(rec, n=12):
    """The first lines of the most telling output: a sanitizer report or crash trace, else the lines of
    every command that say what hpctrain decided (errors, warnings, the last line)."""
    for c in rec["commands"]:
        for p in ("ERROR: AddressSanitizer", "runtime error:", "ERROR: LeakSanitizer", "infinite loop closing",
                  "Process received signal"):
            i = c["out"].find(p)
            if i >= 0:
                start = c["out"].rfind("\n", 0, i) + 1
                return c["label"], c["out"][start:].splitlines()[:n * 3]
    lines = []
    for c in rec["commands"]:
        lines += [f"{c['label']}: {x}" for x in c["out"].splitlines() if TELLING.search(x)][:n]
    return "all", lines[:n * 2]


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
