"""Disk full (2 ranks, mlp, ~0.55 MB per checkpoint).
tmpfs: the run directory on a 1 MB tmpfs (skipped if mount is not permitted): the first checkpoint
fits, the second does not: exit code 1 on every rank, the error names the path and the bytes
needed, LATEST still names the first checkpoint, which reads back; no temporary file is left.
The real write failure (EFBIG under a file-size limit) is tested in-process by the unit tests."""
from common import *

BASE = ["--data.synthetic", "true", "--data.synthetic_samples", "256", "--data.synthetic_height", "20",
        "--data.synthetic_width", "20", "--data.synthetic_channels", "1", "--model.name", "mlp",
        "--model.mlp_hidden", "128", "--train.global_batch", "16", "--train.epochs", "0", "--train.max_steps", "10",
        "--train.device", "cpu", "--train.eval", "false", "--train.log_every_steps", "1000",
        "--checkpoint.every_steps", "2"]


def no_temporaries(d):
    cd = os.path.join(d, "checkpoints")
    return not any(".tmp." in f for f in os.listdir(cd) + os.listdir(d)) if os.path.isdir(cd) else True


mnt = fresh_dir("tmpfs")
os.makedirs(mnt)
mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt], capture_output=True).returncode == 0
if mounted:
    try:
        d = os.path.join(mnt, "run")
        rc, out = run(BASE + ["--run.dir", d], np_ranks=2)
        check(rc == 1, f"tmpfs: exit code 1 (got {rc})") or print(out)
        check(ckpt(d, 4) in out and "bytes" in out and "needed" in out, "tmpfs: the error names the path and the bytes needed")
        check(out.count("hpctrain: rank 1 stops at step") == 1 and out.count("hpctrain: fatal (rank 0, step") == 1,
              "tmpfs: every rank stops cleanly at the same step, the cause reported once") or print(out)
        check(latest(d) == ckpt(d, 2) and state(ckpt(d, 2))[1]["step"] == 2, "tmpfs: LATEST still names step 2, which reads back")
        check(not os.path.exists(ckpt(d, 4)) and no_temporaries(d), "tmpfs: no partial checkpoint or temporary file")
        check(metrics(d, "run_end")[-1]["exit_code"] == 1, "tmpfs: run_end records exit code 1")
    finally:
        subprocess.run(["umount", mnt])
else:
    # RLIMIT_FSIZE cannot stand in here: MPI_Init's shared-memory files exceed any limit below one
    # checkpoint. The real write failure (EFBIG) is covered in-process by the unit test
    # "disk full (file-size limit) ..." in tests/unit/test_checkpoint.cpp.
    print("skip: cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN)", flush=True)
    sys.exit(77)

finish()
