#!/usr/bin/env bash
# hpctrain bench allreduce on 2 ranks: small sweep plus the bucket path, exact correctness pass, JSON
# written (fp32, and bf16 on the wire: half the bytes); a damaged element makes it count the error
# and exit 1.
set -euo pipefail
: "${HT_BIN:?}" "${HT_MPIEXEC:?}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() { "$HT_MPIEXEC" --oversubscribe --bind-to none -np 2 "$HT_BIN" bench allreduce \
          --min-bytes 8 --iters 3 --warmup 1 --bucket-mb 0.125 "$@"; }

run --max-bytes 256K --out "$tmp/ok.json" | tee "$tmp/ok.txt"
grep -q "wrong elements: 0  OK" "$tmp/ok.txt"
/usr/bin/python3 - "$tmp/ok.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["world_size"] == 2 and j["communicator"] == "mpi" and j["wrong_total"] == 0, j
rows = j["results"]
sweep = [r for r in rows if r["path"] == "allreduce_sum"]
assert [r["bytes"] for r in sweep] == [8 << k for k in range(16)], [r["bytes"] for r in sweep]
for r in rows:
    assert r["wrong"] == 0 and r["time_us"] > 0, r
    assert abs(r["algbw_GBps"] - r["bytes"] / r["time_us"] / 1e3) <= 1e-9 * max(1, r["algbw_GBps"]), r
    assert abs(r["busbw_GBps"] - r["algbw_GBps"] * 2 * (2 - 1) / 2) < 1e-12, r
b = [r for r in rows if r["path"] == "bucketer"]
assert len(b) == 1 and b[0]["buckets"] == 4 and b[0]["bytes"] == 4 * 128 * 1024, b
print("bench allreduce JSON ok")
PY

# dist.grad_dtype = bf16: the gradient path's average with a bf16 wire; sizes count wire bytes, so
# the same element count reports half the bytes, and a bucket of the same MiB holds twice the elements.
run --max-bytes 256K --grad-dtype bf16 --out "$tmp/bf16.json" | tee "$tmp/bf16.txt"
grep -q "wrong elements: 0  OK" "$tmp/bf16.txt"
/usr/bin/python3 - "$tmp/ok.json" "$tmp/bf16.json" <<'PY'
import json, sys
f32, bf = (json.load(open(p)) for p in sys.argv[1:3])
assert bf["grad_dtype"] == "bf16" and bf["dtype"] == "bfloat16" and bf["bytes_per_element"] == 2 and bf["wrong_total"] == 0, bf
sweep = [r for r in bf["results"] if r["path"] == "average"]
assert [r["bytes"] for r in sweep] == [8 << k for k in range(16)], [r["bytes"] for r in sweep]
assert all(r["bytes"] == 2 * r["count"] for r in sweep), sweep
by_count = {r["count"]: r["bytes"] for r in f32["results"] if r["path"] == "allreduce_sum"}
for r in sweep:
    if r["count"] in by_count:
        assert r["bytes"] * 2 == by_count[r["count"]], (r, by_count[r["count"]])
for r in bf["results"]:
    assert abs(r["algbw_GBps"] - r["bytes"] / r["time_us"] / 1e3) <= 1e-9 * max(1, r["algbw_GBps"]), r
b32 = [r for r in f32["results"] if r["path"] == "bucketer"][0]
b16 = [r for r in bf["results"] if r["path"] == "bucketer"][0]
assert b16["bytes"] == b32["bytes"] and b16["count"] == 2 * b32["count"] and b16["buckets"] == 4, (b32, b16)
print("bench allreduce bf16: wire bytes are half the fp32 bytes per element")
PY
set +e
run --grad-dtype fp16 --max-bytes 64 > "$tmp/usage.txt" 2>&1
rc=$?
set -e
[[ $rc -eq 2 ]] && grep -q "grad-dtype must be fp32 or bf16" "$tmp/usage.txt" || { cat "$tmp/usage.txt"; echo "expected exit 2 for --grad-dtype fp16, got $rc"; exit 1; }

set +e
run --test-corrupt-rank 1 --max-bytes 64 > "$tmp/bad.txt" 2>&1
rc=$?
set -e
cat "$tmp/bad.txt"
[[ $rc -eq 1 ]] || { echo "expected exit 1 with a damaged element, got $rc"; exit 1; }
grep -q "FAILED" "$tmp/bad.txt"
echo "PASS"
