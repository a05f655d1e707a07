"""A peer that stops answering, on one host (issue 14 items 3 and 4, the collective guard in
mpi/collective_guard.hpp). usage: test_lost_peer.py stalled | term_while_stuck | slow_save | notice |
slow_rank

stalled: 2 ranks train (dist.timeout_s = 4); rank 1 is SIGSTOPped mid-run. Rank 0 must exit 1
  within dist.timeout_s + 10 s, naming rank 1 and its host as lost; mpirun exits non-zero; no rank left.
term_while_stuck: the same with dist.timeout_s = 120; 2 s after the stall rank 0 gets SIGTERM. It must
  say at once which peer does not answer and end within 10 s + the grace of the signal, not 120 s.
slow_save: rank 0's checkpoint writes take 6 s (ckpt_write_delay_ms) with dist.timeout_s = 2: the
  other rank waits behind the save while rank 0 answers probes, and the run finishes (exit 0).
notice: 3 ranks; rank 0 is in a 60 s checkpoint write (not waiting on peers) when rank 2 is
  SIGSTOPped. Rank 1, waiting behind the save, finds rank 2 lost and tells rank 0 before it ends, so
  rank 0 too names rank 2 (rank 1's notice) and ends within moments of rank 1, instead of being
  killed by mpirun without a word.
slow_rank: 2 ranks (dist.timeout_s = 4); rank 1's compute thread sleeps 60 s in the data phase of
  step 1 (HT_TEST_FAULTS slow_data_ms) while its other threads answer probes. Rank 0 must end within
  dist.timeout_s + 10 s saying that every peer answered and where each rank is: itself in step 1 waiting
  in a collective, rank 1 in step 1, phase data, in no collective (issue 27: the slow rank named, with
  its step and phase, from the answer to the probe). Both ranks leave a flight record (rank 0 at its
  time-out, rank 1 at the launcher's SIGTERM) and `hpctrain inspect --flight` names rank 1 as behind,
  in step 1, phase data, outside the collective rank 0 waits in.
Environment (ctest): HT_BIN, HT_MPIEXEC, OMPI_* for root/oversubscribe."""
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

HT = os.environ["HT_BIN"]
MPIRUN = os.environ.get("HT_MPIEXEC", "mpirun")
GRACE = 10.0  # docs/exit_codes.md#lost-peers
SLACK = 3.0   # a loaded 2-core machine


def flags(run_dir, *extra):
    opts = {"--data.synthetic": "true", "--data.synthetic_samples": "400000", "--data.synthetic_height": "8",
            "--data.synthetic_width": "8", "--data.synthetic_channels": "1", "--model.name": "mlp",
            "--model.mlp_hidden": "32", "--run.dir": run_dir, "--run.seed": "7", "--train.device": "cpu",
            "--train.threads": "1", "--train.log_every_steps": "1000", "--train.global_batch": "64",
            "--train.epochs": "0", "--train.max_steps": "100000", "--optim.schedule": "constant"}
    opts.update(zip(extra[::2], extra[1::2]))
    return [t for kv in opts.items() for t in kv]


def start(run_dir, *extra, env=None, np=2):
    # Each rank's stderr to its own file (not through mpirun), pids known from the files' names.
    cmd = [MPIRUN, "--oversubscribe", "--bind-to", "none", "-np", str(np), "bash", "-c",
           'echo $$ > "$0.rank$OMPI_COMM_WORLD_RANK.pid"; exec "$1" train "${@:2}" 2>"$0.rank$OMPI_COMM_WORLD_RANK.err"',
           run_dir, HT] + flags(run_dir, *extra)
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, **(env or {})))


def steps(run_dir):
    try:
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            return sum(1 for line in f if '"step"' in line and json.loads(line)["event"] == "step")
    except (FileNotFoundError, json.JSONDecodeError):
        return 0


def wait_steps(p, run_dir, n, limit=60):
    t0 = time.time()
    while steps(run_dir) < n:
        if p.poll() is not None:
            raise SystemExit(f"FAIL: the run ended before step {n}:\n{p.stdout.read()[-3000:]}")
        if time.time() - t0 > limit:
            raise SystemExit(f"FAIL: step {n} not reached in {limit} s")
        time.sleep(0.1)


def pid(run_dir, r):
    with open(f"{run_dir}.rank{r}.pid") as f:
        return int(f.read())


def alive(p):
    try:
        with open(f"/proc/{p}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_gone(pids, limit, t0):
    """Seconds since t0 at which each pid had gone; None for pids still there after limit."""
    out = {p: None for p in pids}
    while time.time() - t0 < limit and any(v is None for v in out.values()):
        for p in pids:
            if out[p] is None and not alive(p):
                out[p] = time.time() - t0
        time.sleep(0.05)
    return out


def err(run_dir, r):
    with open(f"{run_dir}.rank{r}.err") as f:
        return f.read()


def cleanup(p, pids):
    for q in pids:
        if alive(q):
            os.kill(q, signal.SIGKILL)
    try:
        p.wait(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


@contextlib.contextmanager
def two_ranks_past_step_30(tmp, name, timeout_s):
    """2 ranks training in tmp/name (dist.timeout_s) past step 30: (run dir, mpirun, rank 0's pid, rank 1's pid)."""
    d = os.path.join(tmp, name)
    p = start(d, "--dist.timeout_s", timeout_s)
    try:
        wait_steps(p, d, 30)
        yield d, p, pid(d, 0), pid(d, 1)
    finally:
        cleanup(p, [pid(d, 0), pid(d, 1)])


def stalled(tmp):
    with two_ranks_past_step_30(tmp, "stalled", "4") as (d, p, r0, r1):
        t0 = time.time()
        os.kill(r1, signal.SIGSTOP)
        gone = wait_gone([r0], 4 + GRACE + SLACK, t0)
        assert gone[r0] is not None, f"rank 0 still running {4 + GRACE + SLACK} s after rank 1 stalled"
        rc = p.wait(timeout=20)
        e = err(d, 0)
        assert "did not complete within dist.timeout_s = 4.0 s" in e and "lost peers" in e, e
        host = os.uname().nodename
        assert f"{host} (rank 1)" in e, e
        assert rc != 0, f"mpirun exited {rc}"
        time.sleep(0.5)
        assert not alive(r1), "the stalled rank 1 was left behind"
        print(f"stalled peer: rank 0 gone after {gone[r0]:.1f} s (limit 4 + {GRACE:.0f} s), mpirun exit {rc}")


def term_while_stuck(tmp):
    with two_ranks_past_step_30(tmp, "term", "120") as (d, p, r0, r1):
        os.kill(r1, signal.SIGSTOP)
        time.sleep(2)
        t0 = time.time()
        os.kill(r0, signal.SIGTERM)
        gone = wait_gone([r0], 10 + GRACE + SLACK, t0)
        assert gone[r0] is not None, f"rank 0 still running {10 + GRACE + SLACK} s after SIGTERM (stuck in MPI)"
        e = err(d, 0)
        assert f"no answer to a probe within 0.5 s from: {os.uname().nodename} (rank 1)" in e, e
        assert "after a stop signal" in e, e
        print(f"SIGTERM while stuck: rank 0 gone {gone[r0]:.1f} s after the signal (dist.timeout_s 120)")


def slow_save(tmp):
    d = os.path.join(tmp, "slow")
    p = start(d, "--dist.timeout_s", "2", "--train.max_steps", "40", "--checkpoint.every_steps", "20",
              env={"HT_TEST_FAULTS": "ckpt_write_delay_ms=6000"})
    try:
        out, _ = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, f"exit {p.returncode}:\n{out[-2000:]}\n{err(d, 0)}\n{err(d, 1)}"
    assert steps(d) == 40
    print("slow save (6 s per write, dist.timeout_s 2): finished, exit 0")


def notice(tmp):
    d = os.path.join(tmp, "notice")
    p = start(d, "--dist.timeout_s", "3", "--checkpoint.every_steps", "20", "--checkpoint.async", "false",
              "--train.global_batch", "48", env={"HT_TEST_FAULTS": "ckpt_write_delay_ms=60000"}, np=3)
    pids = []
    try:
        wait_steps(p, d, 20)  # rank 0 now writes step 20's checkpoint for 60 s; ranks 1, 2 wait for it
        pids = [pid(d, r) for r in range(3)]
        time.sleep(0.5)
        t0 = time.time()
        os.kill(pids[2], signal.SIGSTOP)
        gone = wait_gone(pids[:2], 3 + GRACE + SLACK, t0)
        assert None not in gone.values(), f"ranks 0, 1 not both gone {3 + GRACE + SLACK} s after rank 2 stalled: {gone}"
        host = os.uname().nodename
        e1, e0 = err(d, 1), err(d, 0)
        assert f"lost peers (no answer to a probe within 5.0 s): {host} (rank 2)" in e1, e1
        assert f"{host} (rank 1) ends the run: lost peers {host} (rank 2)" in e0, e0
        assert "this rank was not waiting on peers" in e0, e0
        assert abs(gone[pids[0]] - gone[pids[1]]) < 1.5, gone
        rc = p.wait(timeout=20)
        assert rc != 0, f"mpirun exited {rc}"
        print(f"notice: rank 1 gone after {gone[pids[1]]:.1f} s, rank 0 (in its save) after {gone[pids[0]]:.1f} s,"
              f" naming rank 2 from rank 1's notice; mpirun exit {rc}")
    finally:
        cleanup(p, pids)


def slow_rank(tmp):
    d = os.path.join(tmp, "slow_rank")
    p = start(d, "--dist.timeout_s", "4", env={"HT_TEST_FAULTS": "slow_data_ms=0|60000"})
    pids = []
    try:
        t0 = time.time()
        while not (os.path.exists(f"{d}.rank0.pid") and os.path.exists(f"{d}.rank1.pid")):
            assert time.time() - t0 < 30, "the ranks did not start"
            time.sleep(0.05)
        time.sleep(0.2)
        pids = [pid(d, 0), pid(d, 1)]
        limit = 30 + 4 + GRACE + SLACK  # start-up (vetting, data, model) on a loaded machine, then the limit
        gone = wait_gone(pids[:1], limit, t0)
        assert gone[pids[0]] is not None, f"rank 0 still running {limit:.0f} s after the start"
        rc = p.wait(timeout=20)
        e = err(d, 0)
        host = os.uname().nodename
        assert "did not complete within dist.timeout_s = 4.0 s" in e, e
        assert "every peer answered a probe" in e and "where each rank is [" in e, e
        assert f"{host} (rank 1): step 1, phase data; in no collective, the last #" in e, e
        assert f"{host} (rank 0) (this rank): step 1, phase " in e and "; in 1 collective" in e, e
        assert rc != 0, f"mpirun exited {rc}"
        line = [l for l in e.splitlines() if "where each rank is" in l][0]
        print(f"slow rank: rank 0 gone after {gone[pids[0]]:.1f} s; {line[line.index('where each rank is'):]}")
        # The flight records: rank 0's at its time-out, rank 1's at the launcher's SIGTERM (written by
        # its watchdog thread while the compute thread still sleeps); lined up by inspect --flight.
        flight = os.path.join(d, "flight")
        assert f"flight record: {flight}/rank-00000.json" in e, e
        assert wait_gone(pids[1:], 15, time.time())[pids[1]] is not None, "rank 1 still running"
        for r in (0, 1):
            with open(os.path.join(flight, f"rank-{r:05d}.json")) as f:
                rec = json.load(f)
            assert rec["rank"] == r and rec["world_size"] == 2 and rec["entries"], rec
        assert "collective time-out" in json.load(open(os.path.join(flight, "rank-00000.json")))["reason"]
        assert "stop signal" in json.load(open(os.path.join(flight, "rank-00001.json")))["reason"]
        q = subprocess.run([HT, "inspect", "--flight", d], capture_output=True, text=True, timeout=60)
        assert q.returncode == 0, q.stdout + q.stderr
        rep = q.stdout
        assert "flight records of 2 of 2 ranks" in rep, rep
        assert "(step 1): rank 0 waiting in it" in rep and "not entered by rank 1" in rep, rep
        assert f"behind: rank 1 ({host}): step 1, phase data; in no collective" in rep, rep
        print("slow rank: inspect --flight:\n" + rep)
    finally:
        cleanup(p, pids)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        {"stalled": stalled, "term_while_stuck": term_while_stuck, "slow_save": slow_save,
         "notice": notice, "slow_rank": slow_rank}[sys.argv[1]](tmp)
    print("PASS")
