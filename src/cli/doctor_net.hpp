#pragma once
// hpctrain doctor: the network interfaces of each node and which of them the transports would use.
// Each rank lists its interfaces (getifaddrs: the interfaces of its own network namespace) and the
// selection variables it was started with; rank 0 works out, once per host, what Open MPI's TCP
// transport (btl tcp) and NCCL's socket transport would pick, prints it, and reports the choices that
// break or slow a multi-node run (several candidate interfaces with nothing chosen, a chosen interface
// that a node lacks, no interface at all).
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ht {

/// One network interface of a node.
struct NetInterface {
  std::string name;                ///< "eth0"
  std::vector<std::string> addrs;  ///< IPv4 addresses with prefix length, "10.0.0.1/24" (may be empty)
  bool up = false;                 ///< IFF_UP and IFF_RUNNING
  bool loopback = false;           ///< IFF_LOOPBACK
};

/// The interface-selection variables one rank was started with (empty: unset).
struct NetSelectionEnv {
  std::string btl_tcp_if_include;  ///< OMPI_MCA_btl_tcp_if_include
  std::string btl_tcp_if_exclude;  ///< OMPI_MCA_btl_tcp_if_exclude
  std::string oob_tcp_if_include;  ///< OMPI_MCA_oob_tcp_if_include
  std::string nccl_socket_ifname;  ///< NCCL_SOCKET_IFNAME
};

/// What one rank saw of the network.
struct NetProbe {
  std::vector<NetInterface> interfaces;
  NetSelectionEnv env;
};

/// This process's interfaces (getifaddrs; IPv4 addresses) and selection variables. Never throws: a
/// failing getifaddrs gives an empty list.
NetProbe probe_network();

/// The interfaces Open MPI's btl tcp would use on a node with `ifs` and selection `env`: the names or
/// IPv4 subnets (a.b.c.d/n) of btl_tcp_if_include, else every up interface not matching
/// btl_tcp_if_exclude (default: loopback). Open MPI stripes over all of them.
std::vector<std::string> mpi_tcp_interfaces(const std::vector<NetInterface>& ifs, const NetSelectionEnv& env);

/// The interface NCCL's socket transport and bootstrap would use (the first match; empty: none), by
/// NCCL_SOCKET_IFNAME's rules: a comma-separated list of name prefixes, "=" for exact names, "^" to
/// exclude; unset, an "ib" interface first, then any up interface but docker* and loopback.
std::string nccl_socket_interface(const std::vector<NetInterface>& ifs, const NetSelectionEnv& env);

/// "eth0 10.0.0.1/24, lo 127.0.0.1/8 (down)": one line for the table.
std::string describe_interfaces(const std::vector<NetInterface>& ifs);

void to_json(nlohmann::json& j, const NetProbe& p);
/// Throws nlohmann::json::exception on a missing key.
void from_json(const nlohmann::json& j, NetProbe& p);

}  // namespace ht
