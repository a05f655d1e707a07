#!/usr/bin/env bash
# hpctrain bench allreduce on 2 ranks: small sweep plus the bucket path, exact correctness pass, JSON
# written; a damaged element makes it count the error and exit 1.
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

set +e
run --test-corrupt-rank 1 --max-bytes 64 > "$tmp/bad.txt" 2>&1
rc=$?
set -e
cat "$tmp/bad.txt"
[[ $rc -eq 1 ]] || { echo "expected exit 1 with a damaged element, got $rc"; exit 1; }
grep -q "FAILED" "$tmp/bad.txt"
echo "PASS"
