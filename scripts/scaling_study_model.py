"""scripts/scaling_study.py: the model's arithmetic (fabric presets, allreduce times, exposed
communication, checkpoint interval, spot wall time, efficiency); unit-tested in
tests/slurm/test_scaling_model.py with hand-computed values."""
import math


# Fabric presets: bus bandwidth (GB/s, as nccl-tests' busbw) and per-step latency (us).
# Node fabrics: NCCL all_reduce_perf busbw on 8-GPU NVSwitch nodes, large messages.
# Networks: per node, rails x link rate x efficiency (NCCL over IB reaches about 90% of line rate
# with one NIC per GPU).
PRESETS = {
    "nvswitch-a100": {"busbw_GBps": 230.0, "latency_us": 8.0,
                      "what": "8x A100 SXM, NVLink3/NVSwitch (600 GB/s per GPU)"},
    "nvswitch-h100": {"busbw_GBps": 450.0, "latency_us": 8.0,
                      "what": "8x H100 SXM, NVLink4/NVSwitch (900 GB/s per GPU)"},
    "ib-200": {"busbw_GBps": 8 * 25.0 * 0.9, "latency_us": 20.0,
               "what": "8 rails x 200 Gb/s InfiniBand HDR per node"},
    "ib-400": {"busbw_GBps": 8 * 50.0 * 0.9, "latency_us": 15.0,
               "what": "8 rails x 400 Gb/s InfiniBand NDR per node"},
    # CPU clusters (ranks instead of GPUs): MPI over shared memory in a node, one NIC per node.
    "shm": {"busbw_GBps": 10.0, "latency_us": 2.0, "what": "MPI over shared memory within a node"},
    "ib-200x1": {"busbw_GBps": 25.0 * 0.9, "latency_us": 3.0, "what": "1 x 200 Gb/s InfiniBand per node (MPI)"},
    "eth-25": {"busbw_GBps": 3.125 * 0.9, "latency_us": 30.0, "what": "1 x 25 Gb/s Ethernet per node (MPI over TCP)"},
}
# Default systems: (node fabric, network). GPU systems for GPU measurements, CPU ones for CPU.
SYSTEMS = {
    "a100-ib200": ("nvswitch-a100", "ib-200"),
    "h100-ib400": ("nvswitch-h100", "ib-400"),
    "cpu-ib200": ("shm", "ib-200x1"),
    "cpu-eth25": ("shm", "eth-25"),
}
DEFAULT_SYSTEMS = {"cuda": ["a100-ib200", "h100-ib400"], "cpu": ["cpu-ib200", "cpu-eth25"]}


# ---------------------------------------------------------------------------------------------
# Model arithmetic (unit-tested in tests/slurm/test_scaling_model.py with hand-computed values)

def ring_allreduce_s(nbytes, n, busbw_Bps, latency_s):
    """Ring allreduce time: 2(n-1)/n * bytes / busbw + 2(n-1) * latency; 0 for one rank."""
    if n <= 1:
        return 0.0
    return 2.0 * (n - 1) / n * nbytes / busbw_Bps + 2.0 * (n - 1) * latency_s


def tree_allreduce_s(nbytes, n, busbw_Bps, latency_s):
    """Pipelined tree allreduce (reduce then broadcast): 2 * bytes / busbw + 2 ceil(log2 n) latency."""
    if n <= 1:
        return 0.0
    return 2.0 * nbytes / busbw_Bps + 2.0 * math.ceil(math.log2(n)) * latency_s


def allreduce_s(nbytes, n, fabric, algo="best"):
    """Allreduce time for `n` ranks on `fabric` (dict busbw_GBps, latency_us); algo ring|tree|best."""
    bw = fabric["busbw_GBps"] * 1e9
    lat = fabric["latency_us"] * 1e-6
    ring = ring_allreduce_s(nbytes, n, bw, lat)
    tree = tree_allreduce_s(nbytes, n, bw, lat)
    if algo == "ring":
        return ring
    if algo == "tree":
        return tree
    return min(ring, tree)


def fabric_for(n, gpus_per_node, node_fabric, network):
    """The slowest level an n-rank job spans: the node fabric within one node, else the network."""
    if n <= gpus_per_node:
        return node_fabric
    # Beyond one node the ring/tree crosses the network; the node fabric is faster and hidden.
    return {"busbw_GBps": min(node_fabric["busbw_GBps"], network["busbw_GBps"]),
            "latency_us": max(node_fabric["latency_us"], network["latency_us"])}


def exposed_comm_s(launch_s, comm_s, backward_end_s):
    """Buckets launched at launch_s[i] (in order), each taking comm_s[i] on one shared fabric:
    bucket i starts at max(launch_s[i], end of bucket i-1). Returns the time past backward_end_s
    the step waits (0 when communication is fully hidden)."""
    end = 0.0
    for t, c in zip(launch_s, comm_s):
        end = max(end, t) + c
    return max(0.0, end - backward_end_s)


def uniform_timeline(total_bytes, bucket_bytes, forward_s, backward_s):
    """Bucket sizes and launch times when no timeline was measured: buckets of bucket_bytes (the
    last one smaller), each launched when backward has produced its share of the gradients."""
    sizes = []
    left = total_bytes
    while left > 0:
        sizes.append(min(bucket_bytes, left))
        left -= sizes[-1]
    launches, done = [], 0.0
    for s in sizes:
        done += s
        launches.append(forward_s + backward_s * done / total_bytes)
    return sizes, launches


def checkpoint_interval_s(delta_s, mtbf_s):
    """Daly's first-order optimum checkpoint interval sqrt(2 delta M) - delta (Young's sqrt(2 delta M)
    once delta >= M/2, past which Daly's first-order form falls again, to 0 at delta = 2 M). Daly rather
    than Young: Young's derivation leaves out the time spent writing the checkpoint itself. The same
    formula and name as checkpoint_interval_s in src/train/checkpoint_schedule.hpp (training's
    checkpoint.mtbf_minutes)."""
    young = math.sqrt(2.0 * delta_s * mtbf_s)
    return young - delta_s if delta_s < mtbf_s / 2 else young


def spot_wall_factor(delta_s, mtbf_s, restart_s):
    """Wall time / useful work time under preemption: (1 + delta/tau) / (1 - (tau/2 + delta/2 + restart)/M).
    Returns (factor, tau). inf when preemptions come faster than work can progress."""
    if not math.isfinite(mtbf_s):
        return 1.0, math.inf
    tau = checkpoint_interval_s(delta_s, mtbf_s)
    lost = (tau / 2 + delta_s / 2 + restart_s) / mtbf_s
    if lost >= 1:
        return math.inf, tau
    return (1 + delta_s / tau) / (1 - lost), tau


def efficiency(throughput_n, n, throughput_1):
    """Scaling efficiency: throughput(n) / (n * throughput(1))."""
    return throughput_n / (n * throughput_1)
