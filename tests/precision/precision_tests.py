#!/usr/bin/python3
"""Loss scaling and the bf16 gradient wire through the hpctrain binary (issue 13; CPU, mpirun).

usage: precision_tests.py scale_exact | scale_skip | scale_resume | grad_bf16
  scale_exact   fp32 with train.loss_scale.enabled = fp32 without, bit for bit, on 1 and 2 ranks
                (every scale is a power of two: scaling and unscaling are exact), and the scale doubles
                every growth_interval clean steps
  scale_skip    2 ranks, NaN in rank 1's input at step 3: both ranks skip that step together and halve
                the scale (the parameters stay identical on both ranks, which they would not with
                different scales: each rank's share of the fused unscale would differ); a back-off
                does not count towards train.max_nonfinite_steps
  scale_resume  a run stopped by SIGTERM and resumed continues exactly (losses, scale, clean count,
                every tensor of the final checkpoint) as the uninterrupted one
  grad_bf16     2 ranks with dist.grad_dtype = bf16 follow the fp32 losses (tolerance below), the
                ranks stay identical, and the run_start config records the key
  export_lowp UNIT_BIN   checkpoints of low-precision runs (fp32 with loss scaling; bf16 and fp16 where
                this build trains in them, else reported as not available) through scripts/export_torch.py:
                float32 master weights, strict load into the PyTorch module, and PyTorch's fp32 forward
                on them equal to ours (ht_unit_tests [.interop]) within 1e-5 relative
Environment (set by ctest): HT_BIN, HT_MPIEXEC, OMPI_*.
"""
import os
import shutil
import subprocess
import sys
import tempfile

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "dataset"))
from common import records, train_flags  # noqa: E402  (metrics.jsonl records, flags over defaults)

HT = os.environ["HT_BIN"]
MPIRUN = os.environ.get("HT_MPIEXEC", "mpirun")


def run(np_, args, expect=0, faults=None, timeout=300):
    cmd = [MPIRUN, "--oversubscribe", "--bind-to", "none", "-np", str(np_), HT, "train"] + args
    env = dict(os.environ)
    env.pop("HT_TEST_FAULTS", None)
    if faults:
        env["HT_TEST_FAULTS"] = faults
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout, env=env)
    if expect is not None and p.returncode != expect:
        print(p.stdout)
        raise SystemExit(f"FAIL: {' '.join(cmd)} exited {p.returncode}, expected {expect}")
    return p


def base(run_dir, *extra):
    return train_flags({"--data.synthetic": "true", "--data.synthetic_samples": "1024", "--data.synthetic_height": "12",
                        "--data.synthetic_width": "12", "--data.synthetic_channels": "1", "--model.name": "fmnist_cnn",
                        "--run.dir": run_dir, "--run.seed": "11", "--train.device": "cpu", "--train.threads": "1",
                        "--train.global_batch": "64", "--train.max_steps": "12", "--train.epochs": "0",
                        "--train.eval": "false", "--optim.lr": "0.05", "--dist.check_replicas_every": "1"}, extra)


SCALE = ["--train.loss_scale.enabled", "true", "--train.loss_scale.initial", "1024",
         "--train.loss_scale.growth_interval", "4"]


def scale_exact(tmp):
    for np_ in (1, 2):
        a, b = os.path.join(tmp, f"plain{np_}"), os.path.join(tmp, f"scaled{np_}")
        run(np_, base(a))
        run(np_, base(b, *SCALE))
        la = [s["loss"] for s in records(a, "step")]
        sb = records(b, "step")
        lb = [s["loss"] for s in sb]
        assert len(la) == 12 and la == lb, f"{np_} rank(s): losses differ with loss scaling:\n{la}\n{lb}"
        assert all("loss_scale" not in s for s in records(a, "step")), "loss_scale logged without scaling"
        scales = [s["loss_scale"] for s in sb]
        assert scales == [1024.0] * 4 + [2048.0] * 4 + [4096.0] * 4, scales
        assert all(s["replicas_identical"] for s in sb)
        with h5py.File(os.path.join(b, "checkpoints", "step-00000012.h5"), "r") as f:
            assert f["floats/loss_scale"][0] == 8192.0 and f["ints/loss_scale_clean_steps"][0] == 0
        with h5py.File(os.path.join(a, "checkpoints", "step-00000012.h5"), "r") as f:
            assert f["floats/loss_scale"][0] == 1.0 and "loss_scale_clean_steps" not in f["ints"]
        print(f"{np_} rank(s): 12 losses bitwise equal with and without loss scaling; scale {scales[0]} -> 8192")


def scale_skip(tmp):
    d = os.path.join(tmp, "skip")
    # max_nonfinite_steps = 1: a plain non-finite step would end the run; the back-off does not.
    p = run(2, base(d, *SCALE, "--train.max_nonfinite_steps", "1"), faults="nan_at_step=3;nan_rank=1")
    steps = records(d, "step")
    skipped = [s for s in steps if s["skipped"]]
    assert len(skipped) == 1 and skipped[0]["step"] == 4 and skipped[0]["loss_scale"] == 1024.0, skipped
    assert all(s["replicas_identical"] for s in steps), "the ranks diverged: they did not agree on the scale"
    scales = [s["loss_scale"] for s in steps]
    # 3 clean steps, the skip halves to 512 and restarts the count, 4 clean -> 1024, 4 clean -> 2048.
    assert scales == [1024.0] * 4 + [512.0] * 4 + [1024.0] * 4 + [2048.0], scales
    assert "non-finite gradient at loss scale 1024, halved" in p.stdout, p.stdout
    end = records(d, "run_end")[0]
    assert end["nonfinite_steps"] == 1 and end["steps"] == 12 and end["status"] == "finished", end
    # At min scale the skip is a real non-finite step again: max_nonfinite_steps = 1 ends the run.
    d2 = os.path.join(tmp, "atmin")
    p = run(2, base(d2, *SCALE, "--train.loss_scale.min", "1024", "--train.max_nonfinite_steps", "1"),
            faults="nan_at_step=3;nan_rank=1", expect=None)
    assert p.returncode == 1 and "train.max_nonfinite_steps = 1" in p.stdout, (p.returncode, p.stdout[-2000:])
    print("NaN on rank 1: both ranks skipped step 4 and halved 1024 -> 512; at min scale the run stops")


def h5_all(path):
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda n, o: out.__setitem__(n, o[()]) if isinstance(o, h5py.Dataset) else None)
    return out


def scale_resume(tmp):
    ref, work = os.path.join(tmp, "ref"), os.path.join(tmp, "work")
    args = SCALE + ["--checkpoint.every_steps", "5", "--train.max_steps", "14"]
    run(2, base(ref, *args), faults="nan_at_step=2;nan_rank=0")
    run(2, base(work, *args), faults="nan_at_step=2;nan_rank=0;signal_at_step=5;signal_rank=1", expect=75)
    with h5py.File(os.path.join(work, "checkpoints", "step-00000005.h5"), "r") as f:
        saved = (f["floats/loss_scale"][0], f["ints/loss_scale_clean_steps"][0])
    assert saved == (512.0, 3), saved  # 2 clean, the skip halves to 512, then 3 clean steps (3, 4, 5)
    run(2, base(work, *args))
    la = [(s["step"], s["loss"], s["loss_scale"]) for s in records(ref, "step")]
    lb = [(s["step"], s["loss"], s["loss_scale"]) for s in records(work, "step")]
    assert len(la) == 15 and lb[-9:] == la[-9:], f"resumed run differs:\n{la}\n{lb}"
    a, b = h5_all(os.path.join(ref, "checkpoints", "step-00000014.h5")), h5_all(os.path.join(work, "checkpoints", "step-00000014.h5"))
    assert sorted(a) == sorted(b)
    for k in a:
        if k in ("strings/config", "strings/config_hash"):
            continue
        assert np.array_equal(a[k], b[k]), f"{k} differs after the resume"
    print("resumed after step 5 (scale 512, 3 clean steps): the last 9 steps and the final checkpoint are bitwise equal")


# bf16 rounds every gradient element once per partial sum (relative 2^-8 at most each); over 30 SGD steps
# the loss of fmnist_cnn stays within 2 % of the fp32 run (measured here: 0.69 % at most); the
# bound is several times the observed gap and far below the loss's own change over the run (~30 %).
BF16_REL_TOL = 0.02


def grad_bf16(tmp):
    a, b = os.path.join(tmp, "fp32"), os.path.join(tmp, "bf16")
    steps = ["--train.max_steps", "30"]
    run(2, base(a, *steps))
    run(2, base(b, *steps, "--dist.grad_dtype", "bf16"))
    la = [s["loss"] for s in records(a, "step")]
    sb = records(b, "step")
    lb = [s["loss"] for s in sb]
    assert all(s["replicas_identical"] for s in sb), "bf16 wire: the ranks diverged"
    assert "grad_dtype = bf16" in records(b, "run_start")[0]["config"]
    assert la[0] == lb[0], "the first loss comes before any exchange"
    rel = max(abs(x - y) / abs(x) for x, y in zip(la, lb))
    assert lb != la, "bf16 wire gave the fp32 losses exactly: nothing was rounded"
    assert rel <= BF16_REL_TOL, f"bf16 wire: largest relative loss gap {rel:.4f} > {BF16_REL_TOL}"
    assert lb[-1] < 0.8 * lb[0], f"bf16 wire: loss did not fall ({lb[0]} -> {lb[-1]})"
    print(f"bf16 wire: 30 losses within {rel:.2e} relative of fp32 (tolerance {BF16_REL_TOL})")


def our_forward(unit_bin, ck, tmp, x, num_classes):
    """hpctrain's forward (evaluation mode, fp32) on checkpoint `ck` for input x, via ht_unit_tests."""
    inp, out = os.path.join(tmp, "input.h5"), os.path.join(tmp, "logits.h5")
    with h5py.File(inp, "w") as f:
        f["input"] = x
        f.attrs["model"] = "fmnist_cnn"
        f.attrs["num_classes"] = num_classes
        f.attrs["mlp_hidden"] = 64
    env = dict(os.environ, HT_INTEROP_CKPT=ck, HT_INTEROP_INPUT=inp, HT_INTEROP_OUTPUT=out, OMP_NUM_THREADS="1")
    p = subprocess.run([unit_bin, "[.interop]"], env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    with h5py.File(out, "r") as f:
        return f["logits"][()]


def export_lowp(tmp, unit_bin):
    import torch
    sys.path.insert(0, os.path.join(os.environ.get("HT_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", "..")), "scripts"))
    import ht_torch
    export = os.path.join(os.path.dirname(ht_torch.__file__), "export_torch.py")
    variants = {"fp32_loss_scale": ["--train.precision", "fp32", *SCALE], "bf16": ["--train.precision", "bf16"],
                "fp16": ["--train.precision", "fp16"]}
    done = []
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 1, 28, 28)).astype(np.float32)
    for name, flags in variants.items():
        d = os.path.join(tmp, name)
        p = run(1, base(d, "--data.synthetic_height", "28", "--data.synthetic_width", "28", "--train.max_steps", "6",
                        *flags), expect=None)
        why = [l for l in p.stdout.splitlines() if "error" in l and "train.precision" in l]
        if p.returncode == 2 and why:  # refused as a usage error (exit 2) naming train.precision
            print(f"{name}: not available here: {why[0].strip()}")
            continue
        assert p.returncode == 0, p.stdout[-3000:]
        ck = os.path.join(d, "checkpoints", "step-00000006.h5")
        with h5py.File(ck, "r") as f:
            w = f["param/conv1.weight"][()]
            assert w.dtype == np.float32, w.dtype
            if name != "fp32_loss_scale":
                # Master weights, not bf16/fp16 values widened: the low mantissa bits are in use.
                assert np.any(w.view(np.uint32) & 0xFFFF), f"{name}: conv1.weight holds only 16-bit values"
            if "loss_scale" in name or name == "fp16":
                assert "loss_scale_clean_steps" in f["ints"], f"{name}: no loss scaler state"
        out = os.path.join(d, "export.pth")
        e = subprocess.run(["/usr/bin/python3", export, ck, out], capture_output=True, text=True)
        assert e.returncode == 0, e.stdout + e.stderr
        sd = torch.load(out)
        assert all(v.dtype in (torch.float32, torch.long) for v in sd.values())
        m = ht_torch.build_model("fmnist_cnn", 10, 1, 28, 28)
        m.load_state_dict(sd, strict=True)
        m.eval()
        with torch.no_grad():
            theirs = m(torch.from_numpy(x)).numpy()
        # Our forward loads param/ and buffer/ only (the interop hook refuses unused tensors): the
        # same values without momentum/, written by scripts/ht_torch.py.
        tensors, ints, floats, strings = ht_torch.read_checkpoint(ck)
        weights = os.path.join(d, "weights.h5")
        ht_torch.write_checkpoint(weights, [(n, t) for n, t in tensors if not n.startswith("momentum/")])
        ours = our_forward(unit_bin, weights, tmp, x, 10)
        rel = float(np.linalg.norm(ours - theirs) / np.linalg.norm(theirs))
        assert rel < 1e-5, f"{name}: exported model's logits differ from ours: relative {rel:.2e}"
        done.append(name)
        print(f"{name}: exported, strict load, PyTorch fp32 logits within {rel:.1e} of ours")
    assert "fp32_loss_scale" in done


if __name__ == "__main__":
    name = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix=f"ht_precision_{name}_")
    try:
        globals()[name](tmp, *sys.argv[2:])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("PASS")
