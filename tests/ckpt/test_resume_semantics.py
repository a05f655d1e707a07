"""Resume rules (one rank, mlp): a rerun refuses a changed model or global batch unless
run.allow_config_change; run.fresh starts over (old checkpoints moved aside); --init-from loads
parameters only and --reset-head re-initialises the last linear layer for a new class count;
--checkpoint.mtbf_minutes picks the Young/Daly interval from the measured cost and logs it."""
import math

from common import *

BASE_KEYS = {"data.synthetic": "true", "data.synthetic_samples": "256", "data.synthetic_height": "8",
             "data.synthetic_width": "8", "data.synthetic_channels": "1", "model.name": "mlp",
             "model.mlp_hidden": "32", "train.global_batch": "16", "train.epochs": "0", "train.max_steps": "12",
             "train.device": "cpu", "train.eval": "false", "train.log_every_steps": "1000"}


def A(*extra, **over):
    """Config flags: BASE_KEYS with overrides (section__key=value), then extra arguments."""
    keys = dict(BASE_KEYS)
    keys.update({k.replace("__", "."): v for k, v in over.items()})
    out = []
    for k, v in keys.items():
        out += ["--" + k, v]
    return out + list(extra)


d = fresh_dir("sem")
rc, out = run(A("--run.dir", d), env=faults(signal_at_step=6))
check(rc == 75, f"run stopped after step 6 (exit {rc})")

rc, out = run(A("--run.dir", d, train__global_batch="32"))
check(rc == 2 and "train.global_batch = 16" in out and "allow_config_change" in out,
      f"changed global batch refused with exit 2 naming both values (exit {rc})") or print(out)
rc, out = run(A("--run.dir", d, model__name="fmnist_cnn"))
check(rc == 2 and "model.name = mlp" in out, f"changed model refused with exit 2 (exit {rc})") or print(out)
rc, out = run(A("--run.dir", d, "--run.allow_config_change", "true", train__global_batch="32"))
check(rc == 0 and "resumed from" in out, f"run.allow_config_change resumes anyway (exit {rc})") or print(out)
# The console's start and end: the keys that differ from the defaults (not all of them), then where
# everything went and the next command; after a resume, the steps of this start too.
check("config (differs from the defaults; every key in " + d + "/config.ini):\n  run.dir = " + d in out
      and "\n  train.global_batch = 32\n" in out and "optim.momentum" not in out,
      "the console lists the keys that differ from the defaults") or print(out)
check("done: 12 steps (6 in this start) in " in out, "the end line counts the steps of this start") or print(out)
check(f"run directory: {d} (config.ini, metrics.jsonl; last checkpoint {ckpt(d, 12)})\nnext: hpctrain report {d}\n" in out,
      "the console ends with the run directory, the last checkpoint and the next command") or print(out)

rc, out = run(A("--run.dir", d, "--run.fresh", "true"))
check(rc == 0 and "run.fresh: previous checkpoints moved to" in out and "resumed from" not in out,
      f"run.fresh starts over (exit {rc})") or print(out)
check(any(n.startswith("checkpoints.before-fresh-") for n in os.listdir(d)), "old checkpoints kept aside")
check(metrics(d, "step")[-1]["step"] == 12 and metrics(d, "run_start")[-1]["resumed_from_step"] == 0,
      "the fresh run trained from step 0")

# Fine-tuning: parameters from a 10-class checkpoint into a 4-class model.
src = ckpt(d, 12)
ft = fresh_dir("finetune")
rc, out = run(A("--run.dir", ft, "--model.num_classes", "4", "--init-from", src, data__synthetic_classes="4"))
check(rc == 2 and "does not fit this run: /param/fc3.weight is [10, 32] there (the checkpoint holds model mlp)" in out
      and "add --reset-head" in out and "is invalid" not in out,
      f"--init-from with another class count: incompatible, not invalid, and the way out (exit {rc})") or print(out)
rc, out = run(A("--run.dir", ft, "--model.num_classes", "4", "--init-from", src, "--reset-head", "--optim.lr", "0",
                   data__synthetic_classes="4",
                   train__max_steps="1"))
check(rc == 0 and "head reset: fc3.weight fc3.bias" in out, f"--init-from X --reset-head trains (exit {rc})") or print(out)
a, _ = state(src)
b, _ = state(ckpt(ft, 1))
kept = [k for k in a if k.startswith("param/") and not k.startswith("param/fc3")]
check(kept and all(a[k].tobytes() == b[k].tobytes() for k in kept), f"{len(kept)} backbone tensors loaded exactly (lr 0)")
check(b["param/fc3.weight"].shape[0] == 4, "the head has the new class count")

# A changed schedule length on resume is said loudly, naming both lengths and the learning rate jump.
ln = fresh_dir("longer")
rc, out = run(A("--run.dir", ln))
check(rc == 0, f"12-step run (exit {rc})") or print(out)
rc, out = run(A("--run.dir", ln, train__max_steps="24"))
check(rc == 0 and "planned over 12 steps" in out and "now planned over 24 steps" in out and "moves from" in out,
      f"resuming with train.max_steps 12 -> 24 warns about the re-stretched cosine schedule (exit {rc})") or print(out)
ev = metrics(ln, "resume")
check(ev and ev[-1]["saved_total_steps"] == 12 and ev[-1]["total_steps"] == 24,
      "the resume event records both schedule lengths")
rc, out = run(A("--run.dir", ln, train__max_steps="24"))
check("planned over" not in out, "no warning when the length is unchanged") or print(out)

# Young/Daly: interval = sqrt(2 C M) - C (Daly; sqrt(2 C M) once C >= M/2) from the measured checkpoint cost.
yd = fresh_dir("young_daly")
rc, out = run(A("--run.dir", yd, "--checkpoint.mtbf_minutes", "0.01"))
ev = metrics(yd, "checkpoint_interval")
check(rc == 0 and "checkpoint interval (Young/Daly)" in out and ev, f"Young/Daly interval logged (exit {rc})") or print(out)
if ev:
    e = ev[0]
    want = math.sqrt(2 * e["cost_s"] * 0.6) - (e["cost_s"] if e["cost_s"] < 0.3 else 0)
    check(abs(e["interval_s"] - want) < 1e-6 * e["interval_s"],
          f"interval {e['interval_s']:.3f} s = sqrt(2 x C {e['cost_s']:.4f} s x 0.6 s) - C")
    check(metrics(yd, "checkpoint")[0]["reason"] == "young_daly_measure", "the first checkpoint measures the cost")

# A run killed after its final checkpoint and evaluation, before its run_end (a Slurm job preempted
# in its last seconds): the rerun resumes at the final step, evaluates the final model again and
# writes a run_end with the run's test accuracy; the report counts that evaluation once.
fe = fresh_dir("final_eval")
rc, out = run(A("--run.dir", fe, train__eval="true"))
end = metrics(fe, "run_end")
check(rc == 0 and end and end[-1]["test_top1"] >= 0, f"a run with evaluation finishes (exit {rc})") or print(out)
if end:
    want = end[-1]["test_top1"]
    path = os.path.join(fe, "metrics.jsonl")
    lines = open(path).read().splitlines(keepends=True)
    last_end = max(i for i, l in enumerate(lines) if '"run_end"' in l)
    open(path, "w").writelines(lines[:last_end])  # as if killed before its run_end
    rc, out = run(A("--run.dir", fe, train__eval="true"))
    end2 = metrics(fe, "run_end")
    check(rc == 0 and "evaluating the final model again" in out, f"the rerun at the final step evaluates (exit {rc})") or print(out)
    check(end2 and end2[-1]["test_top1"] == want, f"its run_end has the run's test top-1 {want} "
          f"(got {end2[-1]['test_top1'] if end2 else None})")
    rep = subprocess.run([HT, "report", fe, "--out", os.path.join(fe, "report")], capture_output=True, text=True)
    runs = json.load(open(os.path.join(fe, "report", "summary.json")))["runs"] if rep.returncode == 0 else [{}]
    check(rep.returncode == 0 and runs[0].get("evaluations") == 1 and runs[0].get("final_top1") == want,
          f"the report counts one evaluation, top-1 {want} (exit {rep.returncode})") or print(rep.stdout + rep.stderr, runs)

# A rerun with --init-from on a run directory that has checkpoints resumes, and says that it ignores
# --init-from (a requeued fine-tuning job keeps its command line); a changed key is named with both values.
rc, out = run(A("--run.dir", fe, "--init-from", src, train__eval="true", optim__lr="0.02"))
check(rc == 0 and f"ignoring --init-from {src}" in out and "resumes at step 12" in out,
      f"--init-from on a run with checkpoints is ignored out loud (exit {rc})") or print(out)
check("the config differs from the one saved in the checkpoint: optim.lr 0.01 -> 0.02" in out,
      "the changed key is named with both values") or print(out)

# hpctrain inspect RUN_DIR lists the run's checkpoints and steps (not dataset shards); a checkpoint's
# epoch is 1-based, as the console prints it.
p = subprocess.run([HT, "inspect", fe], capture_output=True, text=True)
check(p.returncode == 0 and f"run directory {fe}" in p.stdout and f"{ckpt(fe, 12)}  <- LATEST" in p.stdout,
      f"inspect RUN_DIR lists the checkpoints and LATEST (exit {p.returncode})") or print(p.stdout + p.stderr)
p = subprocess.run([HT, "inspect", ckpt(fe, 12)], capture_output=True, text=True)
check(p.returncode == 0 and "  step: 12  epoch: 1 (step 12 of it)" in p.stdout,
      "inspect names the checkpoint's epoch 1-based") or print(p.stdout + p.stderr)
# The checkpoint carries how the run was doing (to pick the best one): the last loss and the final top-1.
with h5py.File(ckpt(fe, 12), "r") as f:
    fl = {k: float(f["floats"][k][0]) for k in f["floats"]}
check(fl.get("test_top1") == want and "train_loss" in fl and fl["train_loss"] == metrics(fe, "step")[-1]["loss"],
      f"floats/test_top1 = the run's top-1 {want}, floats/train_loss = the last step's loss: {fl}")

# A zero that used to crash (SIGFPE, exit 136): refused before anything runs, naming the key.
rc, out = run(A("--run.dir", fresh_dir("log0"), train__log_every_steps="0"))
check(rc == 2 and "train.log_every_steps = 0: must be in [1, 1e+12]" in out,
      f"train.log_every_steps = 0 is refused with exit 2 (exit {rc})") or print(out)

finish()
