#!/usr/bin/env bash
# scripts/device_check.sh without GPU and without building (HT_DEVICE_CPU_ONLY=1,
# HT_DEVICE_SKIP_BUILD=1, the build folder of $HT_BIN): library shim set-up, ldd check, the 2-rank
# mpirun start, doctor, the hand-written JSON (valid, escaped) and the table printed last. The deps
# root is this machine's own /usr, so no .device_deps is needed. The full rehearsal (Debian chroot,
# real packed deps, CUDA build) is described in results/h200/REHEARSAL.md.
set -euo pipefail
tmp=$(mktemp -d /tmp/ht-device-check-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/deps/root" && ln -s /usr "$tmp/deps/root/usr"
note=$'quote " backslash \\ tab \t newline \n end'
rc=0
OUT=$tmp/out HT_DEVICE_CPU_ONLY=1 HT_DEVICE_SKIP_BUILD=1 HT_DEVICE_BUILD_DIR=$(dirname "$HT_BIN") \
  HT_DEVICE_DEPS_DIR=$tmp/deps HT_DEVICE_NOTE=$note \
  bash "$HT_SOURCE_DIR/scripts/device_check.sh" > "$tmp/stdout" 2>&1 || rc=$?
cat "$tmp/stdout"
[[ $rc == 0 ]] || { echo "FAIL: device_check.sh exited $rc"; exit 1; }
/usr/bin/python3 - "$tmp/out/device_check.json" "$tmp/stdout" "$note" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))
out = open(sys.argv[2]).read().rstrip("\n").splitlines()
def check(cond, what):
    if not cond:
        sys.exit(f"FAIL: {what}; json={r}")
check(r.get("note") == sys.argv[3], "the note survives JSON escaping")
check(r.get("missing_libraries") == "none", "hpctrain resolves all its libraries")
check(r.get("mpi_np2_rc") == "0", "mpirun -np 2 hpctrain doctor --device cpu succeeds")
check(r.get("doctor_rc") in ("0", "1"), "doctor ran (exit 1 = no GPU here)")
check(int(r.get("total_s", -1)) >= 0, "total_s recorded")
check(out[-1].startswith("total_s"), f"the table is printed last (last line: {out[-1]!r})")
check(any(l.startswith("==== hpctrain device check") for l in out[-14:]), "table header near the end")
print("device_check.sh CPU path: JSON valid, table last,", len(r), "keys")
PYEOF
