#!/usr/bin/env python3
"""Every blocking MPI call of the GPU build's own code (mpi/gpu/: GPU binding, the NCCL bootstrap) sits
inside a CollectiveWait scope, so a peer dying there ends the run after dist.timeout_s instead of
hanging it. The run-time audit (guard_audit: every MPI call of a run through the profiling interface)
cannot see these calls on a machine without a GPU, so this reads the source instead: a call is
bounded when a `CollectiveWait` declared before it, in the same function, is still in scope (its
block has not closed between the declaration and the call). Braces in comments and string literals
are ignored. A call that is bounded some other way needs restructuring so that this check can see it.

Usage: check_gpu_mpi_calls.py SOURCE_DIR
"""
import glob
import os
import re
import sys

BLOCKING = ("Allreduce", "Reduce", "Bcast", "Barrier", "Gather", "Gatherv", "Allgather", "Allgatherv", "Send",
            "Recv", "Sendrecv", "Wait", "Waitall", "Comm_dup", "Comm_split", "Comm_split_type", "Alltoall")
CALL = re.compile(r"\bMPI_(%s)\s*\(" % "|".join(BLOCKING))
STRING = re.compile(r'"(?:\\.|[^"\\])*"' + r"|'(?:\\.|[^'\\])'")


def code_only(line):
    """The line without its string literals and // comment (block comments are not used for code here)."""
    line = STRING.sub('""', line)
    return line.split("//", 1)[0]


def unbounded_calls(path):
    lines = open(path, encoding="utf-8").read().split("\n")
    depth_at_start, depth = [], 0
    for line in lines:
        depth_at_start.append(depth)
        code = code_only(line)
        depth += code.count("{") - code.count("}")
    problems, calls = [], 0
    for c, line in enumerate(lines):
        code = code_only(line)
        m = CALL.search(code)
        if not m:
            continue
        calls += 1
        # The scopes still open at the call: walking back, a declaration at depth d is in scope while
        # no line in between started below d (its block would have closed there).
        lowest = depth_at_start[c]
        bounded = False
        for k in range(c, -1, -1):
            lowest = min(lowest, depth_at_start[k])
            if k < c and re.search(r"\bCollectiveWait\s+\w+\s*[({]", code_only(lines[k])) and depth_at_start[k] <= lowest:
                bounded = True
                break
            if depth_at_start[k] == 0:
                break  # the top level: no enclosing function left
        if not bounded:
            problems.append(f"{path}:{c + 1}: MPI_{m.group(1)} outside any CollectiveWait scope: {line.strip()}")
    return problems, calls


def main():
    src = sys.argv[1]
    files = sorted(glob.glob(os.path.join(src, "mpi", "gpu", "*.cpp")) + glob.glob(os.path.join(src, "mpi", "gpu", "*.cu")))
    if not files:
        sys.exit(f"FAIL: no sources under {src}/mpi/gpu")
    problems, calls = [], 0
    for f in files:
        p, n = unbounded_calls(f)
        problems += p
        calls += n
    for p in problems:
        print("FAIL:", p)
    if problems:
        return 1
    print(f"check_gpu_mpi_calls: {calls} blocking MPI calls in {len(files)} files of mpi/gpu, each inside a CollectiveWait")
    return 0


if __name__ == "__main__":
    sys.exit(main())
