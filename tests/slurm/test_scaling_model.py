#!/usr/bin/python3
"""Arithmetic of scripts/scaling_study.py's model against hand-computed values, then one end-to-end
run on made-up bench results whose predictions are also worked out by hand."""
import csv
import importlib.util
import json
import math
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(os.path.join(HERE, "..", ".."))
spec = importlib.util.spec_from_file_location("scaling_study", os.path.join(SRC, "scripts", "scaling_study.py"))
ss = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ss)

failures = []


def close(name, got, want, rel=1e-9):
    ok = math.isclose(got, want, rel_tol=rel, abs_tol=1e-15)
    print("%-4s %-48s got %.9g want %.9g" % ("ok" if ok else "FAIL", name, got, want))
    if not ok:
        failures.append(name)


# Ring: 1 GB over 8 ranks at 100 GB/s busbw, 10 us latency:
#   2*7/8 * 1e9 / 100e9 = 0.0175 s; 2*7 * 10e-6 = 0.00014 s; total 0.01764 s.
close("ring 1GB n=8", ss.ring_allreduce_s(1e9, 8, 100e9, 10e-6), 0.01764)
# One rank: nothing to exchange.
close("ring n=1", ss.ring_allreduce_s(1e9, 1, 100e9, 10e-6), 0.0)
# Tree: 2 * 1e9/100e9 = 0.02 s; 2*ceil(log2 8)=6 steps * 10 us = 0.00006 s.
close("tree 1GB n=8", ss.tree_allreduce_s(1e9, 8, 100e9, 10e-6), 0.02006)
# Tree on 1000 ranks: ceil(log2 1000) = 10 -> 20 * 10 us = 0.0002 s; small message 1 MB: 2e6/100e9 = 2e-5.
close("tree 1MB n=1000", ss.tree_allreduce_s(1e6, 1000, 100e9, 10e-6), 2e-5 + 2e-4)
# Ring on 1000 ranks, 1 MB: 2*999/1000*1e6/100e9 = 1.998e-5; 2*999*10e-6 = 0.01998.
close("ring 1MB n=1000", ss.ring_allreduce_s(1e6, 1000, 100e9, 10e-6), 1.998e-5 + 0.01998)
# 'best' picks the tree there.
fab = {"busbw_GBps": 100.0, "latency_us": 10.0}
close("best 1MB n=1000", ss.allreduce_s(1e6, 1000, fab, "best"), 2e-5 + 2e-4)
close("best 1GB n=8 (ring)", ss.allreduce_s(1e9, 8, fab, "best"), 0.01764)

# Fabric choice: within 8 GPUs the node fabric, beyond it the slower network.
node = {"busbw_GBps": 200.0, "latency_us": 5.0}
net = {"busbw_GBps": 50.0, "latency_us": 20.0}
close("fabric n=8 busbw", ss.fabric_for(8, 8, node, net)["busbw_GBps"], 200.0)
close("fabric n=16 busbw", ss.fabric_for(16, 8, node, net)["busbw_GBps"], 50.0)
close("fabric n=16 latency", ss.fabric_for(16, 8, node, net)["latency_us"], 20.0)

# Overlap: buckets launched at 2, 4, 6 ms, each 1 ms on the fabric, backward ends at 6 ms:
# ends at 3, 5, 7 ms -> 1 ms exposed.
close("exposed hidden but last", ss.exposed_comm_s([0.002, 0.004, 0.006], [0.001] * 3, 0.006), 0.001)
# Same buckets taking 3 ms each queue up: 2->5, 5->8, 8->11 -> 5 ms exposed.
close("exposed queued", ss.exposed_comm_s([0.002, 0.004, 0.006], [0.003] * 3, 0.006), 0.005)
# Fully hidden: one bucket at 1 ms taking 1 ms, backward ends at 6 ms.
close("exposed none", ss.exposed_comm_s([0.001], [0.001], 0.006), 0.0)

# Uniform timeline: 100 bytes in buckets of 40 -> 40, 40, 20, launched at forward + backward * 0.4, 0.8, 1.
sizes, launches = ss.uniform_timeline(100, 40, 0.010, 0.020)
close("uniform sizes", sum(a == b for a, b in zip(sizes, [40, 40, 20])), 3)
close("uniform launch 0", launches[0], 0.018)
close("uniform launch 1", launches[1], 0.026)
close("uniform launch 2", launches[2], 0.030)

# Young/Daly: delta 60 s, M 3600 s: sqrt(2*60*3600) = sqrt(432000) = 657.2670690 s; Daly subtracts delta.
close("daly tau", ss.checkpoint_interval_s(60, 3600), math.sqrt(432000) - 60)
# Wall factor: tau = 597.267069; (1 + 60/tau) / (1 - (tau/2 + 30 + 120)/3600)
tau = math.sqrt(432000) - 60
close("spot wall factor", ss.spot_wall_factor(60, 3600, 120)[0],
      (1 + 60 / tau) / (1 - (tau / 2 + 30 + 120) / 3600))
# Numerically: 60/597.267 = 0.100457; lost = (298.634 + 150)/3600 = 0.124621 -> 1.100457/0.875379 = 1.257121
close("spot wall factor (digits)", ss.spot_wall_factor(60, 3600, 120)[0], 1.257121, rel=1e-6)
close("no preemption", ss.spot_wall_factor(60, math.inf, 120)[0], 1.0)
# Efficiency: 8 GPUs at 6400 img/s against 1000 img/s on one: 0.8.
close("efficiency", ss.efficiency(6400, 8, 1000), 0.8)

# ---- end to end on made-up results
# Weak scaling, 32 per rank: compute (data+fwd+bwd+opt) = 1+3+5+1 = 10 ms at n=1 and n=2.
# 1e6 parameters -> 4e6 gradient bytes; --bucket-mb 1 -> buckets 1048576 x3 + 854272.
# A fabric 'flat' of 4 GB/s busbw and 100 us latency, ring only, no overlap (--overlap 0):
#   n=2: 2*(1/2)*4e6/4e9 = 1 ms + 4 buckets * 2*1*100us = 0.8 ms -> 1.8 ms;
#        step 11.8 ms -> 64/0.0118 = 5423.7288 img/s; efficiency 5423.7288/(2*3200) = 0.847458
#   n=1: 10 ms -> 3200 img/s.
with tempfile.TemporaryDirectory() as d:
    res = os.path.join(d, "res")
    os.makedirs(res)
    for n, step_ms in ((1, 10.0), (2, 12.5)):
        j = {"benchmark": "train", "model": "mlp", "device": "cpu", "world_size": n, "global_batch": 32 * n,
             "micro_batch": 32, "parameters": 1000000, "step_ms": step_ms, "data_ms": 1.0, "forward_ms": 3.0,
             "backward_ms": 5.0, "allreduce_ms": step_ms - 10.0, "optimizer_ms": 1.0,
             "images_per_s": 32 * n / (step_ms / 1000)}
        with open(os.path.join(res, "train-weak-n%d.json" % n), "w") as fh:
            json.dump(j, fh)
    out = os.path.join(d, "study")
    rc = ss.main([res, "--out", out, "--system", "flat=flat,flat", "--fabric", "flat=4,100", "--algo", "ring",
                  "--overlap", "0", "--bucket-mb", "1", "--max-gpus", "4", "--gpus-per-node", "8",
                  "--cost-gpus", "2", "--price", "2", "--epoch-samples", "64000", "--epochs", "3",
                  "--preempt-per-node-hour", "0"])
    close("main rc", rc, 0)
    rows = list(csv.DictReader(open(os.path.join(out, "scaling.csv"))))
    meas = {int(r["gpus"]): r for r in rows if r["kind"] == "measured"}
    mod = {int(r["gpus"]): r for r in rows if r["kind"] == "model" and r["scaling"] == "weak"}
    close("measured n=2 efficiency", float(meas[2]["efficiency"]), 5120 / 6400, rel=1e-5)
    close("model n=1 images/s", float(mod[1]["images_per_s"]), 3200, rel=1e-5)
    close("model n=2 comm ms", float(mod[2]["comm_model_ms"]), 1.8, rel=1e-5)
    close("model n=2 images/s", float(mod[2]["images_per_s"]), 64 / 0.0118, rel=1e-5)
    close("model n=2 efficiency", float(mod[2]["efficiency"]), 64 / 0.0118 / 6400, rel=1e-5)
    # n=4: 2*3/4*4e6/4e9 = 1.5 ms + 4 buckets * 2*3*100 us = 2.4 ms -> 3.9 ms; step 13.9 ms.
    close("model n=4 comm ms", float(mod[4]["comm_model_ms"]), 3.9, rel=1e-5)
    # Cost at 2 GPUs: 64000 samples / 5423.7288 img/s = 11.8 s = 0.0032778 h; x2 GPUs = 0.0065556 GPU-h;
    # x 2 per GPU-hour = 0.0131111 per epoch; x3 epochs = 0.0393333 per run.
    cost = list(csv.DictReader(open(os.path.join(out, "cost.csv"))))[0]
    close("cost per epoch", float(cost["cost_per_epoch"]), 11.8 / 3600 * 2 * 2, rel=1e-5)
    close("cost per run", float(cost["cost_per_run"]), 11.8 / 3600 * 2 * 2 * 3, rel=1e-5)
    # Spot without preemptions: 60% off -> 0.4 x on-demand.
    close("spot cost per run", float(cost["spot_cost_per_run"]), 11.8 / 3600 * 2 * 2 * 3 * 0.4, rel=1e-5)
    for png in ("throughput.png", "efficiency.png", "breakdown.png"):
        p = os.path.join(out, png)
        ok = os.path.isfile(p) and open(p, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
        print("%-4s %s written" % ("ok" if ok else "FAIL", png))
        if not ok:
            failures.append(png)

# Measured bucket timeline: the n=2 point carries two buckets launched at 4 ms and 9 ms of a 10 ms
# compute step (forward 3 + backward 5 -> backward ends at 8 ms; data 1 and optimizer 1 included in
# the 10 ms the fractions refer to), 2e6 bytes each. Fabric 'flat' (4 GB/s, 100 us), ring, n=4:
#   each bucket: 2*3/4*2e6/4e9 = 0.75 ms + 2*3*100 us = 0.6 ms -> 1.35 ms
#   bucket 0: 4 -> 5.35 ms; bucket 1: max(9, 5.35) = 9 -> 10.35 ms; exposed = 10.35 - 8 = 2.35 ms
#   step = 10 + 2.35 = 12.35 ms -> 4*32/0.01235 = 10364.37 img/s
with tempfile.TemporaryDirectory() as d:
    res = os.path.join(d, "res")
    os.makedirs(res)
    for n in (1, 2):
        j = {"benchmark": "train", "model": "mlp", "device": "cpu", "world_size": n, "global_batch": 32 * n,
             "micro_batch": 32, "parameters": 1000000, "step_ms": 12.0, "data_ms": 1.0, "forward_ms": 3.0,
             "backward_ms": 5.0, "allreduce_ms": 2.0 if n > 1 else 0.0, "optimizer_ms": 1.0,
             "images_per_s": 32 * n / 0.012}
        if n == 2:
            j["bucket_launch_ms"] = [4.0, 9.0]
            j["bucket_bytes"] = [2000000, 2000000]
        with open(os.path.join(res, "train-weak-n%d.json" % n), "w") as fh:
            json.dump(j, fh)
    out = os.path.join(d, "study")
    rc = ss.main([res, "--out", out, "--system", "flat=flat,flat", "--fabric", "flat=4,100", "--algo", "ring",
                  "--max-gpus", "4", "--cost-gpus", "4"])
    rows = list(csv.DictReader(open(os.path.join(out, "scaling.csv"))))
    mod = {int(r["gpus"]): r for r in rows if r["kind"] == "model" and r["scaling"] == "weak"}
    close("timeline n=4 exposed ms", float(mod[4]["allreduce_ms"]), 2.35, rel=1e-5)
    close("timeline n=4 comm ms", float(mod[4]["comm_model_ms"]), 2.7, rel=1e-5)
    close("timeline n=4 images/s", float(mod[4]["images_per_s"]), 128 / 0.01235, rel=1e-5)

# Precision: points of fp32 and bf16 (the bf16 run with dist.grad_dtype = bf16) in one folder. Without
# --precision the study refuses to mix them (exit 2); with --precision bf16 it models the bf16 points
# only, with 2 bytes per parameter on the wire: 1e6 parameters -> 2e6 bytes, --bucket-mb 1 -> 2
# buckets; flat fabric, ring, no overlap, n=2: 2*(1/2)*2e6/4e9 = 0.5 ms + 2 buckets * 2*1*100 us =
# 0.4 ms -> 0.9 ms; bf16 compute 5 ms (data 0.5, forward 1.5, backward 2.5, optimizer 0.5).
with tempfile.TemporaryDirectory() as d:
    res = os.path.join(d, "res")
    for prec, scale in (("fp32", 1.0), ("bf16", 0.5)):
        os.makedirs(os.path.join(res, prec))
        for n in (1, 2):
            j = {"benchmark": "train", "model": "mlp", "device": "cpu", "world_size": n, "global_batch": 32 * n,
                 "micro_batch": 32, "parameters": 1000000, "step_ms": 10.0 * scale, "data_ms": 1.0 * scale,
                 "forward_ms": 3.0 * scale, "backward_ms": 5.0 * scale, "allreduce_ms": 0.0,
                 "optimizer_ms": 1.0 * scale, "images_per_s": 32 * n / (10.0 * scale / 1000),
                 "precision": prec, "grad_dtype": "bf16" if prec == "bf16" else "fp32"}
            with open(os.path.join(res, prec, "train-weak-n%d.json" % n), "w") as fh:
                json.dump(j, fh)
    out = os.path.join(d, "study")
    common = [res, "--out", out, "--system", "flat=flat,flat", "--fabric", "flat=4,100", "--algo", "ring",
              "--overlap", "0", "--bucket-mb", "1", "--max-gpus", "2", "--cost-gpus", "2"]
    close("mixed precisions without --precision: rc", ss.main(common), 2)
    close("--precision fp16 (none there): rc", ss.main(common + ["--precision", "fp16"]), 2)
    close("--precision bf16: rc", ss.main(common + ["--precision", "bf16"]), 0)
    rows = list(csv.DictReader(open(os.path.join(out, "scaling.csv"))))
    mod = {int(r["gpus"]): r for r in rows if r["kind"] == "model" and r["scaling"] == "weak"}
    meas = [r for r in rows if r["kind"] == "measured"]
    close("bf16: measured points", len(meas), 2)
    close("bf16 n=2 comm ms (2 bytes per parameter)", float(mod[2]["comm_model_ms"]), 0.9, rel=1e-5)
    close("bf16 n=1 images/s", float(mod[1]["images_per_s"]), 32 / 0.005, rel=1e-5)

if failures:
    print("FAILED: %s" % ", ".join(failures))
    sys.exit(1)
print("PASS")
