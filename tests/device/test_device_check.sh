#!/usr/bin/env bash
# scripts/device_check.sh without GPU and without building (HT_DEVICE_SKIP_BUILD=1, the build folder
# of $HT_BIN), the deps root being this machine's own /usr (no .device_deps needed):
# 1. CPU path (HT_DEVICE_CPU_ONLY=1): library shim set-up, ldd check, the 2-rank mpirun start, doctor
#    --device cpu, the hand-written JSON (valid, escaped), exit 0, verdict and table printed last.
# 2. A deadline already spent (HT_DEVICE_TOTAL=0): no timed phase runs, the script exits
#    non-zero and names each item it did not verify, in its output and in the JSON.
# 3. GPU path on this machine without a GPU or GPU tests: it must not pass (the script used to exit 0
#    and count tests it never ran): exit 1, naming the GPU tests, doctor and training.
# The full rehearsal (Debian chroot, real packed deps, CUDA build) is described in results/h200/REHEARSAL.md.
set -euo pipefail
tmp=$(mktemp -d /tmp/ht-device-check-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/deps/root" && ln -s /usr "$tmp/deps/root/usr"
note=$'quote " backslash \\ tab \t newline \n end'
run() {  # run NAME ENV=VALUE...: device_check.sh with this build, output in $tmp/NAME.{out,rc}, json in $tmp/NAME/
  local name=$1; shift
  local rc=0
  env OUT="$tmp/$name" HT_DEVICE_SKIP_BUILD=1 HT_DEVICE_BUILD_DIR="$(dirname "$HT_BIN")" \
    HT_DEVICE_DEPS_DIR="$tmp/deps" HT_DEVICE_NOTE="$note" "$@" \
    bash "$HT_SOURCE_DIR/scripts/device_check.sh" > "$tmp/$name.out" 2>&1 || rc=$?
  echo "$rc" > "$tmp/$name.rc"
  echo "---- $name: exit $rc"; tail -25 "$tmp/$name.out"
}
run cpu HT_DEVICE_CPU_ONLY=1
run late HT_DEVICE_CPU_ONLY=1 HT_DEVICE_TOTAL=0
run gpu HT_DEVICE_CPU_ONLY=0 HT_DEVICE_TOTAL=200
/usr/bin/python3 - "$tmp" "$note" <<'PYEOF'
import json, sys
tmp, note = sys.argv[1], sys.argv[2]
def load(name):
    return (json.load(open(f"{tmp}/{name}/device_check.json")), open(f"{tmp}/{name}.out").read().rstrip("\n").splitlines(),
            int(open(f"{tmp}/{name}.rc").read()))
def check(cond, what, r):
    if not cond:
        sys.exit(f"FAIL: {what}; json={r}")

r, out, rc = load("cpu")
check(rc == 0, f"CPU path exits 0 (got {rc})", r)
check(r.get("note") == note, "the note survives JSON escaping", r)
check(r.get("missing_libraries") == "none", "hpctrain resolves all its libraries", r)
check(r.get("mpi_np2_rc") == "0", "mpirun -np 2 hpctrain doctor --device cpu succeeds", r)
check(r.get("doctor_rc") == "0", "doctor --device cpu finds no problem", r)
check(r.get("unverified") == [], "nothing unverified on the CPU path", r)
check(r.get("verdict") == "cpu_path_ok_gpu_not_checked", "the verdict says the GPU was not checked", r)
check(r.get("comparison_verdict") == "not_run" and r.get("uncompared") == [], "no comparison on the CPU path", r)
check(int(r.get("total_s", -1)) >= 0, "total_s recorded", r)
check(out[-1].startswith("total_s"), f"the table is printed last (last line: {out[-1]!r})", r)
check(any(l.startswith("==== hpctrain device check") for l in out[-14:]), "table header near the end", r)

r, out, rc = load("late")
check(rc == 1, f"a spent deadline exits 1 (got {rc})", r)
check(r.get("verdict") == "not_verified", "verdict not_verified", r)
names = " | ".join(r.get("unverified", []))
check("mpi_np2" in names and "doctor" in names, f"mpi_np2 and doctor named as not verified: {names}", r)
check(any(l.startswith("NOT VERIFIED: mpi_np2: ") and "deadline" in l for l in out), "the output names them and why", r)
check(out[-1].startswith("total_s") and any(l.startswith("verdict") and "NOT VERIFIED" in l for l in out[-3:]),
      "verdict NOT VERIFIED just before total_s", r)

r, out, rc = load("gpu")
check(rc == 1, f"the GPU path without GPU tests or a GPU exits 1 (got {rc})", r)
names = " | ".join(r.get("unverified", []))
check("gpu_tests" in names or "gpu test" in names, f"the GPU tests are named: {names}", r)
check("training" in names, f"the training run is named: {names}", r)
check("bench hpctrain" in names, f"hpctrain's benchmark, which could not run, is named: {names}", r)
compared = " | ".join(r.get("uncompared", []))
check("bench pytorch" in compared and "bench pytorch" not in names,
      f"PyTorch's side is missing from the comparison, not from correctness: {compared}", r)
check(r.get("comparison_verdict") == "incomplete", "the comparison has its own verdict: incomplete", r)
check(any(l.startswith("NOT COMPARED: bench pytorch") for l in out), "the output names what was not compared", r)
check("passed" not in r.get("ctest_gpu_summary", "") or " 0 passed" in r.get("ctest_gpu_summary", "") or
      "not run" in r.get("ctest_gpu_summary", ""), "no GPU test counted as passed", r)
print("device_check.sh: CPU path ok (JSON valid, table last); a spent deadline and a GPU path without GPU exit 1 "
      "naming", len(r.get("unverified", [])), "unverified items")
PYEOF
