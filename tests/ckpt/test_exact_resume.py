"""Exact resume with several ranks (fmnist_cnn with batch norm, random crop + flip, evaluation after
each epoch and at the end): an uninterrupted run against runs stopped by SIGTERM and rerun with the
same command. Each rank keeps its own BatchNorm running statistics, so this needs the checkpoint's
per-rank buffers (rank_buffer/<r>/..., docs/checkpoint.md). Must be bitwise equal: the loss at every
step, every evaluation (test loss and top-1), the final test loss, and EVERY dataset of every
checkpoint written after the resume (tensors, per-rank buffers, counters, config text: the runs use
the same run.dir, one after the other, so even the config text is the same).
  2 ranks, 16 steps per epoch: stops on rank 0 at an epoch boundary (step 16 of 16), on rank 1 inside
  an epoch (step 7), on rank 1 inside the second epoch (step 18).
  3 ranks, 10 steps per epoch: stop on rank 2 inside the first epoch (step 7).
Compatibility: a version-1 checkpoint (no per-rank buffers, as earlier builds wrote) still resumes at
the same world size as it did before: every rank starts from the average, with a note that the resume
is not bitwise exact; the losses (which use batch statistics) stay bitwise equal, the buffers close.
Elastic: a version-2 checkpoint saved on 2 ranks resumes on 1 and 4 ranks from the average buffers."""
from common import *


def base(global_batch, max_steps):
    return ["--data.synthetic", "true", "--data.synthetic_samples", "512", "--data.synthetic_height", "28",
            "--data.synthetic_width", "28", "--data.synthetic_channels", "1", "--model.name", "fmnist_cnn",
            "--train.global_batch", str(global_batch), "--train.epochs", "0", "--train.max_steps", str(max_steps),
            "--train.device", "cpu", "--data.crop_padding", "2", "--data.flip", "true",
            "--checkpoint.every_steps", "4", "--checkpoint.keep_last", "100", "--train.log_every_steps", "100",
            "--train.eval", "true"]


def evals(run_dir):
    """step -> (test loss, top-1) of the last evaluation at each step."""
    return {j["step"]: (j["loss"], j["top1"]) for j in metrics(run_dir, "eval")}


def case(ranks, global_batch, max_steps, steps_per_epoch, stops):
    args = base(global_batch, max_steps)
    work = fresh_dir(f"w{ranks}")  # every run of this world size trains in this directory
    rc, out = run(args + ["--run.dir", work], np_ranks=ranks)
    check(rc == 0, f"{ranks} ranks: straight run exits 0 (got {rc})") or print(out)
    ref = fresh_dir(f"w{ranks}_straight")
    shutil.move(work, ref)
    ref_losses, ref_evals = losses(ref), evals(ref)
    ref_end = metrics(ref, "run_end")[-1]
    check(sorted(ref_losses) == list(range(1, max_steps + 1)), f"{ranks} ranks: straight run logged steps 1..{max_steps}")
    check(max_steps in ref_evals and steps_per_epoch in ref_evals,
          f"{ranks} ranks: straight run evaluated after epoch 1 and at the end ({sorted(ref_evals)})")
    first_ck = {j["step"] for j in metrics(ref, "checkpoint")}
    with h5py.File(ckpt(ref, max_steps), "r") as f:
        check(int(f.attrs["version"]) == 2 and sorted(f["rank_buffer"]) == [str(r) for r in range(ranks)],
              f"{ranks} ranks: the checkpoint is version 2 with rank_buffer/0..{ranks - 1}")

    for name, step, rank in stops:
        name = f"{ranks}_ranks_{name}"
        shutil.rmtree(work, ignore_errors=True)
        rc, out = run(args + ["--run.dir", work], np_ranks=ranks, env=faults(signal_at_step=step, signal_rank=rank))
        check(rc == 75, f"{name}: SIGTERM on rank {rank} after step {step}: exit 75 (got {rc})") or print(out)
        check(f"stopped by SIGTERM after step {step}" in out or f"stopped by a signal on another rank after step {step}" in out,
              f"{name}: every rank stopped after step {step}")
        check(os.path.exists(ckpt(work, step)) and latest(work) == ckpt(work, step), f"{name}: LATEST names step {step}")
        _, ints = state(ckpt(work, step))
        want_in_epoch = (step - 1) % steps_per_epoch + 1
        check(ints["step"] == step and ints["step_in_epoch"] == want_in_epoch and ints["world_size"] == ranks,
              f"{name}: checkpoint step {ints['step']}, step_in_epoch {ints['step_in_epoch']}, world_size {ranks}")
        rc, out = run(args + ["--run.dir", work], np_ranks=ranks)  # the same command
        check(rc == 0, f"{name}: rerun exits 0 (got {rc})") or print(out)
        check(f"resumed from {ckpt(work, step)}: step {step}" in out, f"{name}: rerun says what it resumed")
        check("not bitwise exact" not in out, f"{name}: no note about an inexact resume")
        l, e = losses(work), evals(work)
        check(sorted(l) == list(range(1, max_steps + 1)) and all(l[s] == ref_losses[s] for s in l),
              f"{name}: losses bitwise equal at every step")
        check(e == ref_evals, f"{name}: every evaluation (test loss, top-1) bitwise equal: {e} vs {ref_evals}")
        end = metrics(work, "run_end")[-1]
        check(end["test_loss"] == ref_end["test_loss"] and end["test_top1"] == ref_end["test_top1"],
              f"{name}: final test loss exactly equal ({end['test_loss']!r} vs {ref_end['test_loss']!r})")
        after = sorted(s for s in first_ck if s > step)
        check(after and after[-1] == max_steps, f"{name}: checkpoints after the resume: {after}")
        for s in after:
            ok, why = same_state(ckpt(ref, s), ckpt(work, s), ignore=())
            check(ok, f"{name}: checkpoint step {s}: every dataset bitwise equal ({why})")
        check(len(metrics(work, "run_start")) == 2 and metrics(work, "run_end")[0]["exit_code"] == 75,
              f"{name}: metrics.jsonl appended (two run_start, first run_end exit_code 75)")
    return args, work, ref


def compatibility(args, work, ref, ranks, max_steps):
    stop = 7
    shutil.rmtree(work, ignore_errors=True)
    rc, out = run(args + ["--run.dir", work], np_ranks=ranks, env=faults(signal_at_step=stop, signal_rank=1))
    check(rc == 75, f"v1: stopped after step {stop} (exit {rc})")
    for f in os.listdir(os.path.join(work, "checkpoints")):
        to_version1(os.path.join(work, "checkpoints", f))
    p = subprocess.run([HT, "inspect", ckpt(work, stop)], capture_output=True, text=True)
    check(p.returncode == 0 and "version 1" in p.stdout and "per-rank" not in p.stdout,
          "v1: inspect reads the version-1 file") or print(p.stdout, p.stderr)
    rc, out = run(args + ["--run.dir", work], np_ranks=ranks)
    check(rc == 0 and f"resumed from {ckpt(work, stop)}: step {stop}" in out, f"v1: resumes (exit {rc})") or print(out)
    check("holds no per-rank buffers (checkpoint format version 1)" in out and "not bitwise exact" in out,
          "v1: notes that every rank starts from the average, not bitwise exact")
    l = losses(work)
    check(all(l[s] == losses(ref)[s] for s in l), "v1: losses bitwise equal (they use batch statistics)")
    a, b = datasets(ckpt(ref, max_steps)), datasets(ckpt(work, max_steps))
    worst = max(float(np.abs(a[k] - b[k]).max()) for k in a if k.startswith("buffer/"))
    check(worst <= 1e-5, f"v1: buffers close to the uninterrupted run's (max |d| {worst:.2e})")
    check(int(b["@version"]) == 2 and "rank_buffer/1/bn1.running_mean" in b, "v1: the checkpoints written after it are version 2")

    # Elastic: another world size restores the average (buffer/), ignoring the per-rank copies.
    saved = fresh_dir("w2_saved")
    shutil.rmtree(work, ignore_errors=True)
    rc, _ = run(args + ["--run.dir", work], np_ranks=ranks, env=faults(signal_at_step=stop))
    shutil.move(work, saved)
    for w in (1, 4):
        shutil.copytree(saved, work)
        rc, out = run(args + ["--run.dir", work], np_ranks=w)
        check(rc == 0 and f"saved with world_size {ranks}, now {w}" in out and "not bitwise exact" not in out,
              f"elastic {ranks} -> {w} ranks with per-rank buffers: resumes from the average (exit {rc})") or print(out)
        d = datasets(ckpt(work, max_steps))
        want = sorted(str(r) for r in range(w)) if w > 1 else []
        got = sorted({k.split("/")[1] for k in d if k.startswith("rank_buffer/")})
        check(int(d["@version"]) == (2 if w > 1 else 1) and got == want and int(d["ints/world_size"]) == w,
              f"elastic {ranks} -> {w}: final checkpoint version {int(d['@version'])}, rank_buffer ranks {got}")
        shutil.rmtree(work)


w2 = case(2, 32, 20, 16, [("epoch_end_rank0", 16, 0), ("inside_epoch_rank1", 7, 1), ("second_epoch_rank1", 18, 1)])
compatibility(*w2, 2, 20)
case(3, 48, 14, 10, [("inside_epoch_rank2", 7, 2)])
finish()
