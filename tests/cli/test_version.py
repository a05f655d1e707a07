#!/usr/bin/env python3
"""`hpctrain --version` (docs/cli.md): exit 0 without mpirun, the project version from CMakeLists.txt,
the git commit of the source tree, the build type, the CUDA switch, and library versions that match
the libraries actually loaded (HDF5 through h5py, which uses the same Debian libhdf5)."""
import os
import re
import subprocess
import sys

import h5py

BIN = os.environ["HT_BIN"]
SRC = os.environ["HT_SOURCE_DIR"]


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def run(*args):
    p = subprocess.run([BIN, *args], capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


code, out, err = run("--version")
if code != 0:
    fail(f"--version exited {code}: {err}")
print(out)
lines = out.splitlines()

version = re.search(r"project\(hpctrain VERSION (\S+)", open(os.path.join(SRC, "CMakeLists.txt")).read()).group(1)
if lines[0] != f"hpctrain {version}":
    fail(f"first line {lines[0]!r}, expected 'hpctrain {version}'")

m = re.match(r"commit: ([0-9a-f]{40}|unknown)( \(modified\))?$", lines[1])
if not m:
    fail(f"commit line {lines[1]!r}")
git = subprocess.run(["git", "-C", SRC, "rev-parse", "HEAD"], capture_output=True, text=True)
if git.returncode == 0 and m.group(1) != git.stdout.strip():
    fail(f"commit {m.group(1)} but the source tree is at {git.stdout.strip()}")

if not re.match(r"build: (Release|Debug|RelWithDebInfo|MinSizeRel), \S+ \d", lines[2]):
    fail(f"build line {lines[2]!r}")
if not re.match(r"CUDA backend: (off|on, architectures [0-9,]+)$", lines[3]):
    fail(f"CUDA line {lines[3]!r}")

libs = {}
for line in lines[5:]:
    name, rest = line[2:15].strip(), line[15:]
    libs[name] = [v.strip() for v in rest.split(" / ")]
expected = ["MPI", "HDF5", "oneDNN"] + (["CUDA runtime", "cuDNN", "NCCL", "cuBLAS"] if "on," in lines[3] else [])
if list(libs) != expected:
    fail(f"libraries {list(libs)}, expected {expected}")
hdf5_loaded = libs["HDF5"][-1]
if hdf5_loaded != h5py.version.hdf5_version:
    fail(f"HDF5 loaded {hdf5_loaded}, but the process's libhdf5 (h5py) is {h5py.version.hdf5_version}")
if not libs["MPI"][0].startswith("Open MPI 4.1") and not libs["MPI"][0].startswith("MPI "):
    fail(f"MPI line {libs['MPI']}")
for name, v in libs.items():
    if not re.match(r"(Open MPI )?\d+\.\d+", v[0]):
        fail(f"{name}: built-with version {v[0]!r} is not a version")

code2, out2, _ = run("version")
if code2 != 0 or out2 != out:
    fail("'hpctrain version' differs from 'hpctrain --version'")
print("version: OK")
