#!/usr/bin/python3
"""PyTorch 1.13 CPU baseline for `hpctrain bench train`: the same model, batch, input size and
thread count on synthetic data, SGD (momentum 0.9, weight decay 5e-4) steps timed after warm-up.

usage: bench_torch.py --model NAME --batch B --threads T [--height H --width W --channels C]
                      [--warmup N] [--steps N] [--out FILE]
Prints and writes {"images_per_s": ..., "step_ms": ...}.
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
    ap.add_argument("--out")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = torch_models.build(a.model, a.classes, a.channels, a.height, a.width)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    x = torch.randn(a.batch, a.channels, a.height, a.width)
    y = torch.randint(0, a.classes, (a.batch,))
    times = []
    for i in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if i >= a.warmup:
            times.append(time.perf_counter() - t0)
    step_ms = 1000 * sum(times) / len(times)
    res = {"framework": f"pytorch {torch.__version__}", "model": a.model, "batch": a.batch, "threads": a.threads,
           "height": a.height, "width": a.width, "timed_steps": a.steps, "step_ms": step_ms,
           "images_per_s": a.batch / (step_ms / 1000)}
    print(json.dumps(res))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
