"""hpctrain doctor under mpirun with 2 ranks on a machine without a GPU, then with faked environments
(the test hooks documented in src/cli/cmd_doctor.cpp): each fault must produce its problem, with the
exit code 1; clean setups exit 0. Usage: test_doctor.py FAKE_DRIVER_LIB (env: HT_BIN, HT_MPIEXEC)."""
import json
import os
import subprocess
import sys
import tempfile

BIN = os.environ["HT_BIN"]
MPIEXEC = os.environ.get("HT_MPIEXEC", "mpirun")
FAKE_DRIVER = sys.argv[1]
TMP = tempfile.mkdtemp(prefix="ht_doctor_")
RUN_DIR = os.path.join(TMP, "runs")
HOOKS = [k for k in os.environ if k.startswith("HT_DOCTOR_FAKE_") or k.startswith("HT_FAKE_CUDA")]
failures = []


def doctor(env=None, args=(), np=2, want_rc=None, expect=(), absent=()):
    """Runs doctor; checks the exit code and that each string of `expect` is in stdout."""
    e = {k: v for k, v in os.environ.items() if k not in HOOKS and k not in ("HT_LIBCUDA", "HT_LIBNVML")}
    e.pop("CUDA_VISIBLE_DEVICES", None)
    e.update(env or {})
    js = os.path.join(TMP, "report.json")
    if os.path.exists(js):
        os.remove(js)
    cmd = [MPIEXEC, "--oversubscribe", "-np", str(np), BIN, "doctor", "--run-dir", RUN_DIR, "--json", js, "--allreduce-mb", "1",
           *args]
    p = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=60)
    name = f"{env or {}} {list(args)}"
    out = p.stdout
    if want_rc is not None and p.returncode != want_rc:
        failures.append(f"{name}: exit code {p.returncode}, want {want_rc}\n{out}\n{p.stderr}")
    for s in expect:
        if s not in out:
            failures.append(f"{name}: '{s}' missing from the report:\n{out}\n{p.stderr}")
    for s in absent:
        if s in out:
            failures.append(f"{name}: '{s}' should not be in the report:\n{out}")
    report = json.load(open(js)) if os.path.exists(js) else None
    return p, out, report


# 1. This machine as it is: no GPU driver. A GPU run's check finds the problem and exits 1.
p, out, rep = doctor(want_rc=1, expect=[
    "2 rank(s) on 1 host(s)", "rank  host", "local_rank", "driver missing",
    "[error] gpu: ranks 0, 1 on", "no NVIDIA driver", "fix: run on a GPU node",
    "Allreduce (MPI, 1.00 MiB float32, 2 ranks)", "result correct", "MPI: ", "HDF5: "])
if rep:
    rows = rep["ranks"]
    assert [r["rank"] for r in rows] == [0, 1], rows
    assert rep["exit_code"] == 1
    assert [a for a in rep["allreduce"] if a["backend"] == "MPI"][0]["correct"]
    lines = [l.split() for l in out.splitlines() if l[:2] in ("0 ", "1 ")]
    assert len(lines) == 2 and lines[0][2] == "0" and lines[1][2] == "1", lines  # local_rank column
# 2. The same machine checked for a CPU run: the missing GPU is only a warning, exit 0.
doctor(args=["--device", "cpu", "--min-free-gb", "0"], want_rc=0,
       expect=["checking a CPU run", "[warning] gpu", "0 error(s)"])

# 3. Two ranks given the same GPU UUID: both ranks and the GPU are named.
shared = {"HT_DOCTOR_FAKE_GPU_UUIDS": "GPU-aaa,GPU-aaa"}
doctor(shared, ["--min-free-gb", "0"], want_rc=1,
       expect=["[error] binding: ranks 0 and 1 on host", "would both bind GPU GPU-aaa", "--dist.allow_shared_gpu"])
# ... unless sharing is intended.
doctor(shared, ["--min-free-gb", "0", "--allow-shared-gpu"], want_rc=0, expect=["[warning] binding"])
# 4. One GPU for two ranks on a host.
doctor({"HT_DOCTOR_FAKE_GPU_UUIDS": "GPU-aaa"}, ["--min-free-gb", "0"], want_rc=1,
       expect=["runs 2 ranks but has only 1 distinct GPU(s) visible", "ppr:1:node"])
# 5. Each rank with its own GPU (srun --gpus-per-task=1 style): clean.
p, out, rep = doctor({"HT_DOCTOR_FAKE_GPU_UUIDS": "GPU-aaa;GPU-bbb"}, ["--min-free-gb", "0"], want_rc=0,
                     expect=["GPU-aaa", "GPU-bbb", "No problems found."])
if rep:
    assert rep["binding"]["uuid"] == ["GPU-aaa", "GPU-bbb"], rep["binding"]

# 6. The real dlopen path against the fake driver library: 2 GPUs, ranks bind 0 and 1.
fake = {"HT_LIBCUDA": FAKE_DRIVER, "HT_FAKE_CUDA_DEVICES": "2"}
doctor(fake, ["--min-free-gb", "0"], want_rc=0, expect=[
    "Fake GPU 0", "Fake GPU 1", "GPU-a0a0a0a0-a0a0-a0a0-a0a0-a0a0a0a0a0a0",
    "GPU-a1a1a1a1-a1a1-a1a1-a1a1-a1a1a1a1a1a1", "80.0 GiB", "9.0", "No problems found."])
# 7. Driver too old for the runtime (cuInit: CUDA_ERROR_INSUFFICIENT_DRIVER).
doctor({**fake, "HT_FAKE_CUDA_INIT": "35", "HT_FAKE_CUDA_DRIVER_VERSION": "10020"}, ["--min-free-gb", "0"],
       want_rc=1, expect=["driver older than the runtime", "supports CUDA 10.2", "install a driver for CUDA"])
# 8. Driver present, no device.
doctor({**fake, "HT_FAKE_CUDA_INIT": "100"}, ["--min-free-gb", "0"], want_rc=1,
       expect=["reports no GPU", "CUDA_ERROR_NO_DEVICE"])
# 9. CUDA_VISIBLE_DEVICES empty hides the GPUs.
doctor({**fake, "CUDA_VISIBLE_DEVICES": "", "HT_FAKE_CUDA_INIT": "100"}, ["--min-free-gb", "0"], want_rc=1,
       expect=["CUDA_VISIBLE_DEVICES='' hides every GPU", "unset CUDA_VISIBLE_DEVICES"])

# 10. cuDNN missing at run time / NCCL older than the one built with.
cpu = ["--device", "cpu", "--min-free-gb", "0"]
doctor({"HT_DOCTOR_FAKE_CUDNN_VERSION": "missing/90100"}, cpu, want_rc=1,
       expect=["[error] cudnn", "cuDNN library not found at run time (built with 9.1.0)", "LD_LIBRARY_PATH"])
doctor({"HT_DOCTOR_FAKE_NCCL_VERSION": "21803/22304"}, cpu, want_rc=1,
       expect=["NCCL 2.18.3 at run time is older than the 2.23.4"])
doctor({"HT_DOCTOR_FAKE_CUDNN_VERSION": "8907/90100"}, cpu, want_rc=1, expect=["different major version"])
doctor({"HT_DOCTOR_FAKE_CUDNN_VERSION": "90100;90200"}, cpu, want_rc=1, expect=["ranks load different cuDNN"])
# 11. Different binaries / MPI libraries on different hosts.
doctor({"HT_DOCTOR_FAKE_HOSTS": "nodeA;nodeB", "HT_DOCTOR_FAKE_EXE_HASH": "1111;2222"}, cpu, want_rc=1,
       expect=["2 rank(s) on 2 host(s)", "different hpctrain executables", "binary 1111 on nodeA",
               "binary 2222 on nodeB"])
doctor({"HT_DOCTOR_FAKE_MPI_VERSION": "Open MPI v4.1.4;Open MPI v5.0.3"}, cpu, want_rc=1,
       expect=["ranks run different MPI libraries", "Open MPI v5.0.3"])
# 12. HDF5 run-time library different from the headers.
doctor({"HT_DOCTOR_FAKE_HDF5_VERSION": "1.10.7"}, cpu, want_rc=1, expect=["HDF5 1.10.7 at run time, built with"])
# 13. Network file system with HDF5 file locking on; fixed by HDF5_USE_FILE_LOCKING=FALSE.
doctor({"HT_DOCTOR_FAKE_FSTYPE": "lustre"}, cpu, want_rc=1,
       expect=["is on lustre (a network file system)", "export HDF5_USE_FILE_LOCKING=FALSE"])
doctor({"HT_DOCTOR_FAKE_FSTYPE": "lustre", "HDF5_USE_FILE_LOCKING": "FALSE"}, cpu, want_rc=0,
       expect=["lustre (network)", "HDF5_USE_FILE_LOCKING=FALSE"])
# 14. Little free space in the run directory.
doctor({"HT_DOCTOR_FAKE_FREE_BYTES": "1000000"}, ["--device", "cpu"], want_rc=1,
       expect=["[error] disk", "0.00 GiB free (< 2.00 GiB)"])
# 15. Bad usage.
p, _, _ = doctor(args=["--device", "tpu"], want_rc=2)
if "cuda or cpu" not in p.stderr:
    failures.append("usage error message: " + p.stderr)

# 16. Training on cuda without a usable GPU: exit 2 on every rank, saying why (CPU build: built without
# CUDA; CUDA build on this machine: the driver diagnosis from cuda/gpu_env).
e = {k: v for k, v in os.environ.items() if k not in HOOKS}
p = subprocess.run([MPIEXEC, "--oversubscribe", "-np", "2", BIN, "train", "--data.synthetic", "true",
                    "--train.device", "cuda", "--train.max_steps", "1", "--run.dir", os.path.join(TMP, "cudarun")],
                   env=e, capture_output=True, text=True, timeout=120)
if p.returncode != 2 or "train.device = cuda" not in p.stderr or not (
        "built without CUDA" in p.stderr or "no NVIDIA driver" in p.stderr):
    failures.append(f"train --train.device cuda without a GPU: exit {p.returncode}\n{p.stdout}\n{p.stderr}")

if failures:
    print("\n\n".join(failures))
    sys.exit(1)
print("doctor: all cases passed")
