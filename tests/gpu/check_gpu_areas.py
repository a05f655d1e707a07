#!/usr/bin/env python3
"""Every GPU unit test case runs in exactly one ctest area, and the device check expects exactly the
gpu-labelled tests ctest has. Needs no GPU: ht_gpu_tests lists its cases without one.

Usage: check_gpu_areas.py HT_GPU_TESTS DEVICE_CHECK_SH CTEST AREA=SPEC...
(AREA=SPEC as in tests/cmake/gpu.cmake: the ctest entry gpu_AREA runs HT_GPU_TESTS SPEC.)
"""
import re
import subprocess
import sys


def case_names(binary, spec=None):
    # Catch2 2.x exits with the number of cases listed, so the exit code says nothing here.
    cmd = [binary, "--list-test-names-only"] + ([spec] if spec else [])
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout
    return [line.strip() for line in out.splitlines() if line.strip()]


def main():
    binary, device_check, ctest = sys.argv[1:4]
    areas = dict(a.split("=", 1) for a in sys.argv[4:])
    problems = []
    every = case_names(binary)
    if len(every) < 10:
        problems.append(f"{binary} lists only {len(every)} test cases: {every}")
    seen = {}
    for area, spec in areas.items():
        names = case_names(binary, spec)
        if not names:
            problems.append(f"area {area} ({spec}) selects no test case")
        for n in names:
            seen.setdefault(n, []).append(area)
    for n in every:
        where = seen.get(n, [])
        if len(where) != 1:
            problems.append(f"test case '{n}' is in {len(where)} areas ({', '.join(where) or 'none'}); it must be in one")

    # The device check's list against what ctest registers with the label gpu.
    text = open(device_check).read()
    m = re.search(r"EXPECTED_GPU_TESTS=\(([^)]*)\)", text)
    if not m:
        problems.append(f"{device_check}: no EXPECTED_GPU_TESTS=(...)")
    else:
        expected = m.group(1).split()
        listed = subprocess.run([ctest, "-N", "-L", "^gpu$"], capture_output=True, text=True, timeout=60).stdout
        registered = re.findall(r"Test\s+#\d+: (\S+)", listed)
        for t in sorted(set(registered) - set(expected)):
            problems.append(f"ctest has gpu test {t}, which {device_check} does not expect")
        for t in sorted(set(expected) - set(registered)):
            problems.append(f"{device_check} expects gpu test {t}, which ctest does not have")
        if len(expected) != len(set(expected)):
            problems.append(f"{device_check}: EXPECTED_GPU_TESTS names a test twice")

    for p in problems:
        print("gpu_test_areas:", p)
    if problems:
        return 1
    print(f"gpu_test_areas: {len(every)} test cases in {len(areas)} areas, each in exactly one; "
          f"device_check expects the {len(registered)} gpu tests ctest has")
    return 0


if __name__ == "__main__":
    sys.exit(main())
