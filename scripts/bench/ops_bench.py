#!/usr/bin/python3
"""PyTorch 1.13 CPU timings of the conv2d / linear shapes benchmarked by
`ht_unit_tests "[conv2d_bench]"` / "[linear_bench]" (same shapes, fwd and bwd, median ms).
Usage: OMP_NUM_THREADS=1 /usr/bin/python3 scripts/bench/ops_bench.py [--batch 128] [--reps 5] [--only SUBSTR]"""
import argparse, time
import torch

p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, default=128)
p.add_argument("--reps", type=int, default=5)
p.add_argument("--only", default="")
p.add_argument("--threads", type=int, default=1)
a = p.parse_args()
torch.set_num_threads(a.threads)
nb, fb = a.batch, 64
# name, n, c, h, w, k, r, stride, pad, bias, needs dx
convs = [
    ("r18_stem_3_64_32", nb, 3, 32, 32, 64, 3, 1, 1, False, False),
    ("r18_l1_64_64_32", nb, 64, 32, 32, 64, 3, 1, 1, False, True),
]
# ResNet-18 layers 2-4: a 3x3/2 down-sampling conv, a 3x3 conv at the halved size, a 1x1/2 shortcut.
for stage, (cin, hw) in enumerate([(64, 32), (128, 16), (256, 8)], start=2):
    cout, half = 2 * cin, hw // 2
    convs += [
        (f"r18_l{stage}a_{cin}_{cout}_s2", nb, cin, hw, hw, cout, 3, 2, 1, False, True),
        (f"r18_l{stage}_{cout}_{cout}_{half}", nb, cout, half, half, cout, 3, 1, 1, False, True),
        (f"r18_l{stage}sc_1x1_{cin}_{cout}_s2", nb, cin, hw, hw, cout, 1, 2, 0, False, True),
    ]
convs += [
    ("fmnist_c1_1_32_28", fb, 1, 28, 28, 32, 3, 1, 1, True, False),
    ("fmnist_c2_32_64_14", fb, 32, 14, 14, 64, 3, 1, 1, True, True),
]
# name, n, in, out, bias, needs dx
linears = [
    ("fmnist_fc1_3136_128", fb, 3136, 128, True, True),
    ("fmnist_fc2_128_10", fb, 128, 10, True, True),
    ("r18_fc_512_10", nb, 512, 10, True, True),
]

def bench(mod, x, dy):
    tf, tb, cf, cb = [], [], [], []
    for i in range(a.reps + 1):
        mod.zero_grad(set_to_none=True)
        if x.grad is not None:
            x.grad = None
        t0, c0 = time.perf_counter(), time.process_time()
        y = mod(x)
        t1, c1 = time.perf_counter(), time.process_time()
        y.backward(dy)
        t2, c2 = time.perf_counter(), time.process_time()
        if i:
            tf.append((t1 - t0) * 1e3)
            tb.append((t2 - t1) * 1e3)
            cf.append((c1 - c0) * 1e3)
            cb.append((c2 - c1) * 1e3)
    tf.sort(); tb.sort()
    # Process CPU time is robust against other processes on a shared machine (1 thread: no
    # parallel time to double-count; autograd runs CPU work on the calling thread).
    return tf[len(tf) // 2], tb[len(tb) // 2], min(cf), min(cb)

print("op,shape,n,fwd_ms,bwd_ms,fwd_cpu_min_ms,bwd_cpu_min_ms")
g = torch.Generator().manual_seed(0)
for name, n, c, h, w, k, r, s, pad, bias, dx in convs:
    if a.only not in name:
        continue
    mod = torch.nn.Conv2d(c, k, r, s, pad, bias=bias)
    x = torch.rand(n, c, h, w, generator=g).requires_grad_(dx)
    with torch.no_grad():
        y = mod(x)
    f, b, fm, bm = bench(mod, x, torch.rand(y.shape, generator=g))
    print(f"conv2d,{name},{n},{f:.3f},{b:.3f},{fm:.3f},{bm:.3f}", flush=True)
for name, n, i, o, bias, dx in linears:
    if a.only not in name:
        continue
    mod = torch.nn.Linear(i, o, bias=bias)
    x = torch.rand(n, i, generator=g).requires_grad_(dx)
    f, b, fm, bm = bench(mod, x, torch.rand(n, o, generator=g))
    print(f"linear,{name},{n},{f:.3f},{b:.3f},{fm:.3f},{bm:.3f}", flush=True)
