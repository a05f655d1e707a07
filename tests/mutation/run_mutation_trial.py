"""tests/mutation/run_mutation.py: one trial (an original or a mutant through inspect and training),
its digest and its class."""
import hashlib
import json
import os
import re
import shutil

import h5py

import mutants

from run_mutation_env import CKPT_TRAIN, CONFIG_TEXT, CRASH_PATTERNS, SHARD_TRAIN, VETTING_CRASH, run_cmd


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
