#!/usr/bin/env bash
# Issue 14 item 2: binding and `hpctrain doctor` across nodes (2 nodes, each with two interfaces eth0
# and eth1). Checks: one row per rank with its host; local_rank and the GPU a rank would bind are per
# node (0,1 on each; GPUs faked per rank through doctor.gpu_uuids, as tests/doctor does); each node's
# interfaces are listed with what MPI and NCCL would use, and a node with several candidates and
# nothing chosen gets a warning naming them and the variables to set; a different hpctrain binary on
# node2 (another file bind-mounted over the path, in node2's mount namespace only) and a different HDF5
# on node2's ranks (doctor.hdf5_version) are problems naming node2; `doctor --qualify` names node2 when
# its ranks are slowed.
HT_CLUSTER_NETS=2 HT_TEST_LIMIT_S=${HT_TEST_LIMIT_S:-200}
export HT_CLUSTER_NETS
source "$(dirname "$0")/lib.sh"
py() { /usr/bin/python3 - "$@"; }
doctor() {  # doctor LOG JSON DEVICE [mpirun args...]: 4 ranks, 2 per node
  local log=$1 js=$2 dev=$3
  shift 3
  mpirun --bind-to none --host node1:2,node2:2 "$@" "$HT_BIN" doctor --device "$dev" --run-dir "$work/runs" \
    --json "$js" >"$log" 2>&1
}

# 1. Per-node binding with 2 (fake) GPUs per node, interfaces chosen (the cluster's eth0).
doctor d1.log d1.json cuda -x HT_TEST_FAULTS='doctor.gpu_uuids=GPU-a0,GPU-a1|GPU-a0,GPU-a1|GPU-b0,GPU-b1|GPU-b0,GPU-b1' ||
  fail "doctor with 2 GPUs per node exited $?"
py d1.json <<'PY' || fail "doctor report (run 1)"
import json, sys
r = json.load(open(sys.argv[1]))
hosts = [x["host"] for x in r["ranks"]]
assert hosts == ["node1", "node1", "node2", "node2"], hosts
assert r["binding"]["local_rank"] == [0, 1, 0, 1], r["binding"]
assert r["binding"]["device"] == [0, 1, 0, 1], r["binding"]
assert r["binding"]["uuid"] == ["GPU-a0", "GPU-a1", "GPU-b0", "GPU-b1"], r["binding"]
for x in r["ranks"]:
    names = {i["name"]: i for i in x["net"]["interfaces"]}
    assert {"lo", "eth0", "eth1"} <= set(names), names
    host_no = x["host"][-1]
    assert names["eth0"]["addrs"] == [f"10.213.0.{host_no}/24"], names["eth0"]
    assert x["net"]["env"]["OMPI_MCA_btl_tcp_if_include"] == "eth0"
assert not [p for p in r["problems"] if p["area"] in ("network", "binding", "binary", "hdf5")], r["problems"]
assert r["exit_code"] == 0, r["problems"]
PY
for h in node1 node2; do
  grep -Eq "^  $h +eth0 +eth0 +lo 127.0.0.1/8, eth0 10.213.0.[12]/24, eth1 10.213.1.[12]/24" d1.log ||
    fail "no network row for $h in the doctor's output"
done
grep -Eq '^[0-3] +node2 +1 +1 ' d1.log || fail "no table row of a rank on node2 with local_rank 1, gpu 1"

# 2. Nothing chosen: MPI would stripe over eth0 and eth1 -> a warning with the variables to set.
doctor d2.log d2.json cpu -x OMPI_MCA_btl_tcp_if_include= -x OMPI_MCA_oob_tcp_if_include= ||
  fail "doctor without interface selection exited $?"
py d2.json <<'PY' || fail "doctor report (run 2)"
import json, sys
r = json.load(open(sys.argv[1]))
net = [p for p in r["problems"] if p["area"] == "network"]
assert len(net) == 2 and all(p["severity"] == "warning" for p in net), net
assert "host node1" in net[0]["what"] and "eth0, eth1" in net[0]["what"], net[0]
assert "OMPI_MCA_btl_tcp_if_include" in net[0]["fix"] and "NCCL_SOCKET_IFNAME" in net[0]["fix"], net[0]
PY
grep -q '^  node2 *eth0,eth1 ' d2.log || fail "doctor did not show MPI using eth0,eth1 on node2"

# 3. node2 runs another binary (one byte appended) and loads another HDF5 on its ranks.
cp "$HT_BIN" "$work/hpctrain.node2" && echo >>"$work/hpctrain.node2"
"$src/tests/cluster/node_exec.sh" node2 mount --bind "$work/hpctrain.node2" "$HT_BIN" || fail "bind mount on node2"
doctor d3.log d3.json cpu -x HT_TEST_FAULTS='doctor.hdf5_version=||1.10.7|1.10.7'
rc=$?
"$src/tests/cluster/node_exec.sh" node2 umount "$HT_BIN"
[[ $rc == 1 ]] || fail "doctor with a different binary on node2 exited $rc, expected 1"
py d3.json <<'PY' || fail "doctor report (run 3)"
import json, sys
r = json.load(open(sys.argv[1]))
by = {p["area"]: p for p in r["problems"]}
assert "binary" in by and "on node2" in by["binary"]["what"] and "on node1" in by["binary"]["what"], r["problems"]
hashes = {x["host"]: x["exe_hash"] for x in r["ranks"]}
assert hashes["node1"] != hashes["node2"], hashes
h5 = [p for p in r["problems"] if p["area"] == "hdf5" and "different HDF5" in p["what"]]
assert h5 and "ranks 2, 3: HDF5 1.10.7" in h5[0]["what"], r["problems"]
PY
# 4. Node qualification over the cluster's real links (issue 27): node2's ranks' measured times made
# 10x longer (doctor.qualify_slowdown); node2 named for compute (with 2 nodes the network is measured
# but not rated), both nodes' links measured.
mpirun --bind-to none --host node1:2,node2:2 -x HT_TEST_FAULTS='doctor.qualify_slowdown=1|1|10|10' "$HT_BIN" doctor \
  --device cpu --run-dir "$work/runs" --min-free-gb 0 --qualify --qualify-seconds 0.5 --qualify-fraction 0.3 \
  --json d4.json >d4.log 2>&1
rc=$?
[[ $rc == 1 ]] || fail "doctor --qualify with node2 slowed exited $rc, expected 1"
grep -q '1 of 2 nodes qualified; slow: node2 (compute)' d4.log || fail "doctor --qualify did not name node2"
py d4.json <<'PY' || fail "doctor report (run 4)"
import json, sys
q = {n["host"]: n for n in json.load(open(sys.argv[1]))["qualification"]}
assert sorted(q) == ["node1", "node2"], q
assert q["node2"]["slow_compute"] and not q["node1"]["slow_compute"], q
assert q["node1"]["ranks"] == [0, 1] and q["node2"]["ranks"] == [2, 3], q
assert all(n["gbps"] > 0 and n["gflops"] > 0 and not n["slow_network"] for n in q.values()), q
PY
echo "PASS: doctor across 2 nodes: per-node local_rank/GPU, interfaces and selection, binary and HDF5 differences on node2, qualification naming node2"
