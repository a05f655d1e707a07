// hpctrain doctor's network section (src/cli/doctor_net.hpp): which interfaces Open MPI's TCP
// transport and NCCL's socket transport would pick under each selection variable, the problems the
// analysis reports across hosts, and the JSON round trip. Hand-made interface lists, no network.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "src/cli/doctor_analysis.hpp"
#include "src/cli/doctor_net.hpp"
#include "src/cli/doctor_print.hpp"

using namespace ht;

namespace {

std::vector<NetInterface> two_nics(int host) {
  return {{"lo", {"127.0.0.1/8"}, true, true},
          {"eth0", {"10.0.0." + std::to_string(host) + "/24"}, true, false},
          {"ib0", {"192.168.7." + std::to_string(host) + "/16"}, true, false},
          {"docker0", {"172.17.0.1/16"}, true, false},
          {"eth9", {}, false, false}};
}

RankReport on_host(int rank, const std::string& host, std::vector<NetInterface> ifs, NetSelectionEnv env = {}) {
  RankReport r;
  r.rank = rank;
  r.host = host;
  r.mpi_library = "Open MPI v4.1.4";
  r.exe_hash = "0123456789abcdef";
  r.hdf5_built = r.hdf5_runtime = "1.10.8";
  r.run_dir = {"runs", "/scratch", true, "ext4", false, 1e12, true};
  r.net = {std::move(ifs), std::move(env)};
  return r;
}

std::vector<Problem> network_only(const std::vector<RankReport>& reps) {
  DoctorOptions o;
  o.device = DoctorDevice::cpu;
  std::vector<Problem> out;
  for (auto& p : analyse(reps, o).problems)
    if (p.area == "network") out.push_back(p);
  return out;
}

}  // namespace

TEST_CASE("doctor net: Open MPI's btl tcp selection", "[doctor_net]") {
  const auto ifs = two_nics(1);
  // Default exclude 127.0.0.1/8: every up interface with an address but loopback.
  CHECK(mpi_tcp_interfaces(ifs, {}) == std::vector<std::string>{"eth0", "ib0", "docker0"});
  CHECK(mpi_tcp_interfaces(ifs, {"eth0", "", "", ""}) == std::vector<std::string>{"eth0"});
  CHECK(mpi_tcp_interfaces(ifs, {"192.168.0.0/16", "", "", ""}) == std::vector<std::string>{"ib0"});
  CHECK(mpi_tcp_interfaces(ifs, {"", "lo,docker0", "", ""}) == std::vector<std::string>{"eth0", "ib0"});
  CHECK(mpi_tcp_interfaces(ifs, {"eth9", "", "", ""}).empty());  // down, no address
}

TEST_CASE("doctor net: NCCL_SOCKET_IFNAME rules", "[doctor_net]") {
  const auto ifs = two_nics(1);
  CHECK(nccl_socket_interface(ifs, {}) == "ib0");  // unset: ib first
  std::vector<NetInterface> no_ib = {ifs[0], ifs[3], ifs[1]};
  CHECK(nccl_socket_interface(no_ib, {}) == "eth0");  // then anything but docker and lo
  CHECK(nccl_socket_interface(ifs, {"", "", "", "eth"}) == "eth0");   // prefix
  CHECK(nccl_socket_interface(ifs, {"", "", "", "=eth"}).empty());    // exact
  CHECK(nccl_socket_interface(ifs, {"", "", "", "^lo,eth,ib"}) == "docker0");
  CHECK(nccl_socket_interface({ifs[0]}, {}) == "lo");  // only loopback left
}

TEST_CASE("doctor net: problems across hosts", "[doctor_net]") {
  // One host: shared memory, no network problem whatever the interfaces.
  CHECK(network_only({on_host(0, "a", two_nics(1)), on_host(1, "a", two_nics(1))}).empty());
  // Two hosts with several candidates, nothing chosen: one warning per host naming them.
  auto ps = network_only({on_host(0, "a", two_nics(1)), on_host(1, "b", two_nics(2))});
  REQUIRE(ps.size() == 2);
  CHECK(ps[0].severity == Severity::warning);
  CHECK(ps[0].what.find("host a (interfaces lo 127.0.0.1/8, eth0 10.0.0.1/24,") == 0);
  CHECK(ps[0].what.find("would stripe over eth0, ib0, docker0 and NCCL would use ib0") != std::string::npos);
  CHECK(ps[0].fix.find("OMPI_MCA_btl_tcp_if_include=IF OMPI_MCA_oob_tcp_if_include=IF") != std::string::npos);
  CHECK(ps[0].fix.find("NCCL_SOCKET_IFNAME=IF") != std::string::npos);
  // Chosen: no warning.
  NetSelectionEnv eth0{"eth0", "", "eth0", "eth0"};
  CHECK(network_only({on_host(0, "a", two_nics(1), eth0), on_host(1, "b", two_nics(2), eth0)}).empty());
  // A chosen name host b lacks: an error naming the variable, the name and the host.
  auto b_ifs = two_nics(2);
  b_ifs[1].name = "ens1";
  ps = network_only({on_host(0, "a", two_nics(1), eth0), on_host(1, "b", b_ifs, eth0)});
  REQUIRE(ps.size() == 3);
  CHECK(ps[0].severity == Severity::error);
  CHECK(ps[0].what.find("OMPI_MCA_btl_tcp_if_include=eth0 names 'eth0', which host b (interfaces") == 0);
  CHECK(ps[1].what.find("OMPI_MCA_oob_tcp_if_include=eth0 names 'eth0'") == 0);
  CHECK(ps[2].what.find("host b (") == 0);
  CHECK(ps[2].what.find("): no interface for MPI's TCP transport") != std::string::npos);
  // NCCL matters only in builds with NCCL.
  auto with_nccl = on_host(1, "b", two_nics(2), {"eth0", "", "eth0", "ib9"});
  with_nccl.nccl = {22304, 22304};
  ps = network_only({on_host(0, "a", two_nics(1), eth0), with_nccl});
  REQUIRE(ps.size() == 1);
  CHECK(ps[0].what.find("no interface matches NCCL_SOCKET_IFNAME=ib9") != std::string::npos);
  // Interfaces not probed (empty list): nothing said.
  CHECK(network_only({on_host(0, "a", {}), on_host(1, "b", {})}).empty());
}

TEST_CASE("doctor net: JSON round trip and the printed section", "[doctor_net]") {
  NetProbe p{two_nics(3), {"eth0", "", "eth0", "=eth0"}};
  NetProbe q = nlohmann::json(p).get<NetProbe>();
  REQUIRE(q.interfaces.size() == p.interfaces.size());
  CHECK(q.interfaces[1].name == "eth0");
  CHECK(q.interfaces[1].addrs == std::vector<std::string>{"10.0.0.3/24"});
  CHECK_FALSE(q.interfaces[4].up);
  CHECK(q.env.nccl_socket_ifname == "=eth0");
  CHECK(describe_interfaces(p.interfaces) ==
        "lo 127.0.0.1/8, eth0 10.0.0.3/24, ib0 192.168.7.3/16, docker0 172.17.0.1/16, eth9 (down)");
  DoctorReport rep;
  rep.ranks = {on_host(0, "a", two_nics(1), p.env), on_host(1, "b", two_nics(2), p.env)};
  rep.binding.local_rank = {0, 0};
  rep.binding.device = {-1, -1};
  rep.binding.uuid = {"", ""};
  const std::string out = format_report(rep, DoctorDevice::cpu);
  CHECK(out.find("  host  MPI would use  NCCL would use  interfaces") != std::string::npos);
  CHECK(out.find("  b     eth0           eth0            lo 127.0.0.1/8, eth0 10.0.0.2/24,") != std::string::npos);
  CHECK(out.find("NCCL_SOCKET_IFNAME==eth0 (rank 0)") != std::string::npos);
}
