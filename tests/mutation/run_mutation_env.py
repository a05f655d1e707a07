"""tests/mutation/run_mutation.py: the run's constants (classes, crash signs, training options) and
running one command (its own session, a hang limit, killed with the run)."""
import os
import signal
import subprocess
import threading
import time


HERE = os.path.dirname(os.path.abspath(__file__))
FAIL_CLASSES = ("hang", "crash", "accepted_differs", "verdict_mismatch", "rejected_unnamed")
OK_CLASSES = ("rejected", "rejected_contained", "accepted_same", "accepted_differs_unprotected")
# The line with which hpctrain reports a crash of its vetting child (src/train/file_vetting.cpp): the
# crash happened in that child, which is what it is for; the process itself carried on and exited cleanly.
VETTING_CRASH = "in the vetting process `hpctrain verify`"
CRASH_PATTERNS = ["AddressSanitizer", "LeakSanitizer", "UndefinedBehaviorSanitizer", ": runtime error:",
                  "infinite loop closing library", "Segmentation fault", "double free", "free(): ", "malloc(): ",
                  "corrupted size", "stack smashing", "terminate called", "core dumped", "exited on signal",
                  "Caught signal", "Signal code", "Bus error", "Aborted"]
CONFIG_TEXT = ("strings/config", "strings/config_hash")

COMMON = ["--train.device", "cpu", "--data.crop_padding", "0", "--data.flip", "false", "--train.log_every_steps", "1",
          "--checkpoint.keep_last", "100", "--run.seed", "7", "--train.threads", "1"]
# Shard runs: mlp (every pixel reaches the first layer's output and gradient), one step over the whole
# train split (64 samples), then the whole test split evaluated, then the final checkpoint.
SHARD_TRAIN = COMMON + ["--model.name", "mlp", "--train.global_batch", "64", "--train.epochs", "0",
                        "--train.max_steps", "1", "--train.eval", "true"]
# Checkpoint runs: fmnist_cnn (batch norm: buffers and per-rank buffers), 16 per step, 4 steps per epoch.
CKPT_TRAIN = COMMON + ["--model.name", "fmnist_cnn", "--train.global_batch", "16", "--train.epochs", "0",
                       "--train.eval", "false", "--checkpoint.every_steps", "1"]


def log(*a):
    print(*a, flush=True)


class Env:
    def __init__(self, args):
        self.bin = os.path.abspath(args.bin)
        self.mpiexec = args.mpiexec
        self.env = dict(os.environ)
        self.env.update({
            "OMP_NUM_THREADS": "1", "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
            "OMPI_MCA_rmaps_base_oversubscribe": "1", "OMPI_MCA_btl": "self,vader",
            "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
            # Sanitizers: reports are fatal and have their own exit codes; ASan keeps its SIGSEGV handler
            # (Open MPI's would print a short trace and could hang). Leak checking is off: Open MPI 4.1
            # leaves ~3,300 allocations (117 KB) at exit even for `inspect`, from components it has
            # already unloaded, so their stacks read "<unknown module>" and cannot be suppressed by
            # library. Leaked HDF5 identifiers are still caught: HDF5 then prints "infinite loop
            # closing library" at exit, which counts as a crash here.
            "ASAN_OPTIONS": "detect_leaks=0:exitcode=86:allow_user_segv_handler=0:handle_abort=1:"
                            "check_initialization_order=1",
            "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1:exitcode=87",
        })
        self.env.pop("HT_TEST_FAULTS", None)
        self.timeouts = {}
        self.lock = threading.Lock()


def session_pids(sid):
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as fh:
                st = fh.read()
        except OSError:
            continue
        fields = st[st.rfind(")") + 2:].split()
        if int(fields[3]) == sid and fields[0] != "Z":
            out.append(int(d))
    return out


def kill_session(sid):
    for _ in range(50):
        pids = session_pids(sid)
        if not pids:
            return
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.05)


ACTIVE = set()  # session ids of the commands running now (killed if the run itself is stopped)


def stop_everything(signum, frame):
    for sid in list(ACTIVE):
        kill_session(sid)
    log(f"mutation run: stopped by signal {signum}; every command's processes killed")
    os._exit(128 + signum)


def run_cmd(env, cmd, timeout, cwd, tmpdir):
    """Runs cmd in its own session: (rc, output, seconds, timed_out, leftover process count)."""
    e = dict(env.env, TMPDIR=tmpdir)
    t0 = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=cwd, env=e, start_new_session=True)
    ACTIVE.add(p.pid)
    timed_out = False
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        kill_session(p.pid)
        out, _ = p.communicate()
    dur = time.time() - t0
    left = session_pids(p.pid)
    if left:
        time.sleep(0.5)  # processes that are only just exiting
        left = session_pids(p.pid)
        kill_session(p.pid)
    ACTIVE.discard(p.pid)
    return p.returncode, out.decode("utf-8", "replace"), dur, timed_out, len(left)
