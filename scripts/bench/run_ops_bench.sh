#!/usr/bin/env bash
# Per-op conv2d/linear timings, hpctrain (oneDNN, ht::cpu::*) vs PyTorch 1.13 CPU, 1 thread, same
# shapes. Usage: scripts/bench/run_ops_bench.sh BUILD_DIR [BATCH] [REPS] > out.csv
# Columns: *_cpu_min_ms = minimum process CPU time over REPS (robust on a shared machine);
# *_ms = median wall time. Ratio = torch / hpctrain on (fwd + bwd) CPU time.
set -euo pipefail
build=${1:?build dir}; batch=${2:-128}; reps=${3:-5}
export OMP_NUM_THREADS=1 HT_BENCH_BATCH=$batch HT_BENCH_REPS=$reps
here=$(cd "$(dirname "$0")" && pwd)
ours=$("$build/tests/ht_unit_tests" "[conv2d_bench],[linear_bench]" | grep -E '^(conv2d|linear),')
theirs=$(/usr/bin/python3 "$here/ops_bench.py" --batch "$batch" --reps "$reps" | grep -E '^(conv2d|linear),')
/usr/bin/python3 - "$ours" "$theirs" <<'PY'
import sys
def parse(t):
    return {l.split(",")[1]: l.split(",") for l in t.strip().splitlines()}
o, t = parse(sys.argv[1]), parse(sys.argv[2])
print("op,shape,n,ht_fwd_cpu_ms,ht_bwd_cpu_ms,torch_fwd_cpu_ms,torch_bwd_cpu_ms,speedup_fwd_bwd,ht_fwd_wall_ms,ht_bwd_wall_ms,torch_fwd_wall_ms,torch_bwd_wall_ms")
tot_o = tot_t = 0.0
for k, r in o.items():
    if k not in t: continue
    s = t[k]
    of, ob, tf, tb = float(r[5]), float(r[6]), float(s[5]), float(s[6])
    tot_o += of + ob; tot_t += tf + tb
    print(f"{r[0]},{k},{r[2]},{of:.3f},{ob:.3f},{tf:.3f},{tb:.3f},{(tf+tb)/(of+ob):.2f},{r[3]},{r[4]},{s[3]},{s[4]}")
print(f"total,all,-,{tot_o:.3f},,{tot_t:.3f},,{tot_t/tot_o:.2f},,,,")
PY
