#!/usr/bin/env python3
"""PyTorch GPU counterparts of `hpctrain bench train --train.device cuda` (device check, issue 13):
the same model, batch and input size on synthetic data, SGD (momentum 0.9, weight decay 5e-4),
in the modes users run: eager fp32, eager bf16 autocast + channels_last, eager fp16 autocast +
channels_last + GradScaler, and torch.compile of the bf16 channels_last step. Each mode is timed
with CUDA events over `--steps` steps after `--warmup` (torch.compile's compilation happens in the
warm-up and is reported separately as compile_s). One process for every mode and batch (importing
torch once); the JSON is rewritten after each measurement, so a run stopped at its time limit keeps
what it measured. A mode that fails records its error and the rest go on.

usage: bench_torch_gpu.py --out FILE [--model resnet18_cifar] [--batches 128,512]
                          [--modes eager_fp32,eager_bf16_cl,compile_bf16_cl,eager_fp16_cl]
                          [--warmup 5] [--steps 20] [--budget-s S]
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_models  # noqa: E402

MODES = {  # name: (autocast dtype or None, channels_last, compiled, grad scaler); run in this order
    "eager_fp32": (None, False, False, False),
    "eager_bf16_cl": (torch.bfloat16, True, False, False),
    "compile_bf16_cl": (torch.bfloat16, True, True, False),
    "eager_fp16_cl": (torch.float16, True, False, True),
}


def measure(mode, model_name, batch, warmup, steps, c=3, h=32, w=32, classes=10):
    dtype, cl, compiled, scaled = MODES[mode]
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 is strict fp32, as hpctrain's train.precision fp32
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    model = torch_models.build(model_name, classes, c, h, w).to(dev)
    fmt = torch.channels_last if cl else torch.contiguous_format
    model = model.to(memory_format=fmt)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    scaler = None
    if scaled:
        scaler = torch.amp.GradScaler("cuda") if hasattr(torch.amp, "GradScaler") else torch.cuda.amp.GradScaler()
    x = torch.randn(batch, c, h, w, device=dev).to(memory_format=fmt)
    y = torch.randint(0, classes, (batch,), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=dtype, enabled=dtype is not None):
            loss = F.cross_entropy(model(x), y)
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        return loss

    fn = torch.compile(step) if compiled else step
    t0 = time.perf_counter()
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    warm_s = time.perf_counter() - t0
    torch.cuda.reset_peak_memory_stats()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(steps):
        loss = fn()
    end.record()
    torch.cuda.synchronize()
    step_ms = start.elapsed_time(end) / steps
    return {"mode": mode, "model": model_name, "batch": batch, "timed_steps": steps, "step_ms": step_ms,
            "images_per_s": batch / (step_ms / 1000), "warmup_s": warm_s, "last_loss": float(loss),
            "peak_memory_bytes": torch.cuda.max_memory_allocated(), **({"compile_s": warm_s} if compiled else {})}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default="resnet18_cifar")
    ap.add_argument("--batches", default="128,512")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--budget-s", type=float, default=0, help="skip modes not started within this many s (0: none)")
    a = ap.parse_args()
    t_start = time.perf_counter()
    res = {"framework": f"pytorch {torch.__version__}", "cuda": torch.version.cuda,
           "cudnn": torch.backends.cudnn.version(), "device": torch.cuda.get_device_name(0)
           if torch.cuda.is_available() else "none", "results": [], "errors": []}

    def write():
        tmp = a.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(res, f, indent=2)
        os.replace(tmp, a.out)

    write()
    if not torch.cuda.is_available():
        res["errors"].append("torch.cuda.is_available() is False")
        write()
        return 1
    # The order of --modes: the anchors the issue names first (eager bf16 channels_last, then
    # torch.compile, whose compilation may take most of the budget), fp16 last.
    for mode in a.modes.split(","):
        for batch in (int(b) for b in a.batches.split(",")):
            if a.budget_s and time.perf_counter() - t_start > a.budget_s:
                res["errors"].append(f"{mode} batch {batch}: not run, budget of {a.budget_s} s spent")
                continue
            try:
                r = measure(mode, a.model, batch, a.warmup, a.steps)
                res["results"].append(r)
                print(f"torch {mode:16s} batch {batch:4d}: {r['images_per_s']:9.1f} images/s "
                      f"({r['step_ms']:.2f} ms/step)", flush=True)
            except Exception as e:  # noqa: BLE001 -- record and go on with the next mode
                res["errors"].append(f"{mode} batch {batch}: {type(e).__name__}: {str(e)[:300]}")
                print(f"torch {mode} batch {batch}: FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
            write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
