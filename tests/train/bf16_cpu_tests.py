#!/usr/bin/python3
"""train.precision = bf16 end to end on the CPU (docs/precision.md), through the hpctrain binary.

usage: bf16_cpu_tests.py loss_curve | exact_resume | elastic | cpu_refusals | quickstart
  loss_curve    fmnist_cnn, 200 steps, real Fashion-MNIST (synthetic data is learnt in 40 steps, too
                fast for a curve), batch 64, 1 rank: bf16 follows the fp32 loss curve.
                Tolerance: step 1 (same initial weights, one forward) within 2% relative: the logits
                carry a few roundings of u = 2^-8 each (inputs, weights and activations of 4 layers
                rounded to bf16, products accumulated in float32), and the mean loss is a smooth
                function of them. Afterwards the two runs take different steps (each rounding
                changes the update a little, and training amplifies differences) so single steps
                are not comparable; the means over windows of 20 steps agree within 10% relative +
                0.03, about the spread of fp32 runs that differ only in a seed of the data order.
  exact_resume  bf16: a run stopped by SIGTERM after step 6 and rerun equals the straight run bitwise
                (loss of every step, every dataset of the final checkpoint).
  elastic       bf16: saved at world_size 2 (micro-batch 32), resumed at world_size 1 with 2 accumulation
                steps (the same micro-batches, so batch norm sees the same samples): the same global
                sample stream, losses after the resume within 1e-5 relative of the straight 2-rank run
                (only float32 summation order differs: allreduce against accumulation).
  cpu_refusals  fp16 on the CPU: exit 2 naming oneDNN and suggesting bf16; run_start reports the ISA,
                run_end the peak memory.
  quickstart    real Fashion-MNIST (prepared from /usr/share/datasets/fashion-mnist), the quickstart
                config (configs/fmnist_cnn.ini, 2 ranks x 1 thread, 2 epochs) in bf16: test top-1 >= 0.90.
                Long (label bf16_cpu_long): about 4 min on 2 idle cores.
Environment (set by ctest): HT_BIN (hpctrain), HT_MPIEXEC (mpirun)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ckpt"))
from common import *  # noqa: E402,F401  (run, metrics, losses, check, faults, ckpt, latest, same_state, ...)


def synthetic(run_dir, steps, precision, *extra, data_dir=None):
    """fmnist_cnn on 28x28 synthetic data (or the prepared dataset in data_dir), 1 thread."""
    data = ["--data.dir", data_dir] if data_dir else [
        "--data.synthetic", "true", "--data.synthetic_samples", "2048", "--data.synthetic_height", "28",
        "--data.synthetic_width", "28", "--data.synthetic_channels", "1"]
    return data + ["--model.name", "fmnist_cnn",
            "--train.global_batch", "64", "--train.epochs", "0", "--train.max_steps", str(steps),
            "--train.device", "cpu", "--train.threads", "1", "--train.precision", precision, "--train.eval", "false",
            "--train.log_every_steps", "1000", "--optim.lr", "0.05", "--run.seed", "3", "--run.dir", run_dir] + list(extra)


def fashion_mnist():
    """Fashion-MNIST prepared into a temporary directory (exit 77, skipped, when Debian's copy is absent)."""
    src = "/usr/share/datasets/fashion-mnist"
    if not os.path.isdir(src):
        print("SKIP: no Fashion-MNIST at", src)
        sys.exit(77)
    data = fresh_dir("fmnist_data")
    p = subprocess.run([HT, "prepare", "--format", "fashion-mnist", "--input", src, "--output", data, "--shards", "4"],
                       capture_output=True, text=True)
    check(p.returncode == 0, "prepare Fashion-MNIST") or print(p.stdout, p.stderr)
    return data


def loss_curve():
    data = fashion_mnist()
    curves = {}
    for p in ("fp32", "bf16"):
        d = fresh_dir("curve_" + p)
        args = synthetic(d, 200, p, data_dir=data)
        rc, out = run(args, timeout=600)
        check(rc == 0, f"{p}: 200 steps exit 0 (got {rc})") or print(out)
        curves[p] = [losses(d)[s] for s in range(1, 201)]
    a, b = curves["fp32"], curves["bf16"]
    check(abs(a[0] - b[0]) <= 0.02 * a[0], f"step 1: fp32 loss {a[0]:.5f}, bf16 {b[0]:.5f} (within 2%)")
    check(a[0] != b[0], "step 1: the bf16 loss differs from fp32 (it really ran in bf16)")
    for w in range(0, 200, 20):
        ma, mb = sum(a[w:w + 20]) / 20, sum(b[w:w + 20]) / 20
        check(abs(ma - mb) <= 0.10 * ma + 0.03, f"steps {w + 1}-{w + 20}: mean loss fp32 {ma:.4f}, bf16 {mb:.4f}")
    check(sum(b[-20:]) < 0.5 * sum(b[:20]), "bf16 loss falls (last 20 steps below half the first 20)")
    print("fp32 losses:", [round(x, 4) for x in a])
    print("bf16 losses:", [round(x, 4) for x in b])


def exact_resume():
    args = lambda d: synthetic(d, 12, "bf16", "--checkpoint.every_steps", "4", "--checkpoint.keep_last", "100",
                               "--data.crop_padding", "2", "--data.flip", "true")
    ref = fresh_dir("resume_ref")
    rc, out = run(args(ref), timeout=300)
    check(rc == 0, f"straight bf16 run exits 0 (got {rc})") or print(out)
    work = fresh_dir("resume_work")
    rc, out = run(args(work), timeout=300, env=faults(signal_at_step=6, signal_rank=0))
    check(rc == 75, f"SIGTERM after step 6: exit 75 (got {rc})") or print(out)
    rc, out = run(args(work), timeout=300)
    check(rc == 0, f"rerun resumes and exits 0 (got {rc})") or print(out)
    la, lb = losses(ref), losses(work)
    check(all(la[s] == lb[s] for s in range(1, 13)), "loss of every step 1..12 bitwise equal")
    ok, why = same_state(ckpt(ref, 12), ckpt(work, 12), ignore=CONFIG_TEXT)
    check(ok, "final checkpoint: " + why)


def elastic():
    args = lambda d, *x: synthetic(d, 16, "bf16", "--checkpoint.every_steps", "4",
                                   "--data.crop_padding", "2", "--data.flip", "true", *x)
    ref = fresh_dir("elastic_ref")
    rc, out = run(args(ref), np_ranks=2, timeout=300)
    check(rc == 0, f"straight 2-rank bf16 run exits 0 (got {rc})") or print(out)
    work = fresh_dir("elastic_work")
    rc, out = run(args(work), np_ranks=2, timeout=300, env=faults(signal_at_step=7, signal_rank=0))
    check(rc == 75, f"2-rank bf16 run stopped after step 7 (exit {rc})") or print(out)
    rc, out = run(args(work, "--train.accumulation_steps", "2"), np_ranks=1, timeout=300)
    check(rc == 0, f"resume at world_size 1 x 2 accumulation steps exits 0 (got {rc})") or print(out)
    check("saved with world_size 2, now 1" in out, "says it resumed a world_size-2 checkpoint") or print(out)
    la, lr_ = losses(work), losses(ref)
    check(sorted(la) == list(range(1, 17)), "steps 1..16 logged")
    worst = max(abs(la[s] - lr_[s]) / abs(lr_[s]) for s in range(8, 17))
    check(worst <= 1e-5, f"losses after the resume within 1e-5 relative of the straight run (worst {worst:.2e})")


def cpu_refusals():
    d = fresh_dir("fp16")
    rc, out = run(synthetic(d, 2, "fp16"), timeout=120)
    check(rc == 2, f"fp16 on the CPU exits 2 (got {rc})")
    check("train.precision = fp16: oneDNN cannot train in fp16 on this CPU" in out and "use train.precision = bf16" in out,
          "the message names oneDNN and suggests bf16") or print(out)
    d = fresh_dir("isa")
    rc, out = run(synthetic(d, 2, "bf16"), timeout=120)
    check(rc == 0, f"bf16 2 steps exit 0 (got {rc})") or print(out)
    start = metrics(d, "run_start")[0]
    check(start.get("compute_dtype") == "bfloat16" and start.get("cpu_isa", "unknown") != "unknown",
          f"run_start: compute_dtype {start.get('compute_dtype')}, cpu_isa {start.get('cpu_isa')}")
    end = metrics(d, "run_end")[0]
    check(end.get("peak_rss_bytes", 0) > 10 << 20, f"run_end: peak_rss_bytes {end.get('peak_rss_bytes')}")


def quickstart():
    data = fashion_mnist()
    d = fresh_dir("quickstart_bf16")
    cfg = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "configs", "fmnist_cnn.ini")
    rc, out = run(["--config", cfg, "--data.dir", data, "--run.dir", d, "--run.fresh", "--train.precision", "bf16",
                   "--train.device", "cpu", "--train.threads", "1"], np_ranks=2, timeout=900)
    check(rc == 0, f"quickstart in bf16 exits 0 (got {rc})") or print(out)
    ends = metrics(d, "run_end")
    top1 = ends[0]["test_top1"] if ends else -1
    check(top1 >= 0.90, f"test top-1 after 2 epochs in bf16: {top1:.4f} (>= 0.90; fp32 reaches 0.9037)")


if __name__ == "__main__":
    {"loss_curve": loss_curve, "exact_resume": exact_resume, "cpu_refusals": cpu_refusals,
     "quickstart": quickstart, "elastic": elastic}[sys.argv[1]]()
    finish()
