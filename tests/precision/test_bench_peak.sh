#!/usr/bin/env bash
# hpctrain bench peak (the MFU denominator of scripts/bench_vs_torch.sh): a small matmul in bf16 and
# fp32 gives positive GFLOP/s, names oneDNN's ISA and implementation, writes JSON; bad options exit 2.
set -euo pipefail
: "${HT_BIN:?}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
OMP_NUM_THREADS=1 "$HT_BIN" bench peak --size 256 --reps 2 --out "$tmp/p.json" | tee "$tmp/p.txt"
grep -q "bench peak: bf16 matmul 256^3" "$tmp/p.txt"
/usr/bin/python3 - "$tmp/p.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["benchmark"] == "peak" and j["size"] == 256 and j["isa"] != "", j
for t in ("bf16", "fp32"):
    assert j[t]["best_gflops"] > 0 and j[t]["best_gflops"] >= j[t]["mean_gflops"] > 0 and j[t]["impl"], j
print("bench peak JSON ok:", j["isa"], j["bf16"]["impl"])
PY
set +e
"$HT_BIN" bench peak --dtype fp8 >"$tmp/bad.txt" 2>&1
rc=$?
set -e
[[ $rc -eq 2 ]] && grep -q "dtype must be bf16, fp32 or both" "$tmp/bad.txt" || { cat "$tmp/bad.txt"; echo "expected exit 2, got $rc"; exit 1; }
echo PASS
