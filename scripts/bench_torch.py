#!/usr/bin/python3
"""PyTorch 1.13 CPU baseline for `hpctrain bench train`: the same model, batch, input size and
thread count on synthetic data, SGD (momentum 0.9, weight decay 5e-4) steps timed after warm-up.

usage: bench_torch.py --model NAME --batch B --threads T [--height H --width W --channels C]
                      [--precision fp32|bf16] [--channels-last] [--warmup N] [--steps N] [--out FILE]
--precision bf16: the forward and loss under torch.autocast("cpu", dtype=torch.bfloat16) (PyTorch's
one-line mixed precision; backward follows the forward's dtypes, master weights and SGD stay fp32).
--channels-last: model and input in torch.channels_last memory format (NHWC), which oneDNN prefers.
Prints and writes {"images_per_s": ..., "step_ms": ..., "forward_flops_per_image": ...}; the FLOPs are
those of every Conv2d and Linear (2 x multiply-adds), counted once with forward hooks.
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


def forward_flops_per_image(model, x1):
    """2 x multiply-adds of every Conv2d and Linear in one forward pass of one image."""
    total = [0]

    def conv(m, inp, out):
        total[0] += 2 * out.numel() * (m.in_channels // m.groups) * m.kernel_size[0] * m.kernel_size[1]

    def lin(m, inp, out):
        total[0] += 2 * out.numel() * m.in_features

    hooks = [m.register_forward_hook(conv) for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    hooks += [m.register_forward_hook(lin) for m in model.modules() if isinstance(m, torch.nn.Linear)]
    was = model.training
    model.eval()
    with torch.no_grad():
        model(x1)
    model.train(was)
    for h in hooks:
        h.remove()
    return total[0]


def blas_library():
    """The libblas.so.3 this process loaded (OpenBLAS or Debian's reference BLAS), from /proc/self/maps."""
    try:
        with open("/proc/self/maps") as f:
            paths = {l.split()[-1] for l in f if "libblas.so" in l or "libopenblas" in l}
        return sorted(paths)
    except OSError:
        return []


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--height", type=int, default=32)
    ap.add_argument("--width", type=int, default=32)
    ap.add_argument("--channels", type=int, default=3)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--out")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = torch_models.build(a.model, a.classes, a.channels, a.height, a.width)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    x = torch.randn(a.batch, a.channels, a.height, a.width)
    y = torch.randint(0, a.classes, (a.batch,))
    flops = forward_flops_per_image(model, x[:1])
    if a.channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    bf16 = a.precision == "bf16"
    times = []
    for i in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if i >= a.warmup:
            times.append(time.perf_counter() - t0)
    step_ms = 1000 * sum(times) / len(times)
    res = {"framework": f"pytorch {torch.__version__}", "model": a.model, "batch": a.batch, "threads": a.threads,
           "height": a.height, "width": a.width, "timed_steps": a.steps, "step_ms": step_ms,
           "images_per_s": a.batch / (step_ms / 1000), "precision": a.precision,
           "autocast": "bf16" if bf16 else None, "channels_last": a.channels_last,
           "forward_flops_per_image": flops, "blas": blas_library()}
    print(json.dumps(res))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
