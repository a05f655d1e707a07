#include "src/cli/doctor_net.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <sstream>

namespace ht {
namespace {

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

/// "10.0.0.1/24" -> address and prefix length; false when it is not IPv4 CIDR (or a bare address: /32).
bool parse_cidr(const std::string& s, uint32_t* addr, int* len) {
  const auto slash = s.find('/');
  in_addr a{};
  if (inet_pton(AF_INET, s.substr(0, slash).c_str(), &a) != 1) return false;
  *addr = ntohl(a.s_addr);
  *len = 32;
  if (slash != std::string::npos) {
    try {
      *len = std::stoi(s.substr(slash + 1));
    } catch (const std::exception&) {
      return false;
    }
    if (*len < 0 || *len > 32) return false;
  }
  return true;
}

/// Whether interface `i` matches an Open MPI if_include/if_exclude entry: its name, or a subnet that
/// holds one of its addresses.
bool ompi_matches(const NetInterface& i, const std::string& entry) {
  if (entry == i.name) return true;
  uint32_t net = 0;
  int len = 0;
  if (!parse_cidr(entry, &net, &len)) return false;
  const uint32_t mask = len == 0 ? 0 : ~uint32_t{0} << (32 - len);
  for (const auto& a : i.addrs) {
    uint32_t addr = 0;
    int alen = 0;
    if (parse_cidr(a, &addr, &alen) && (addr & mask) == (net & mask)) return true;
  }
  return false;
}

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

/// NCCL's matchIfList: each entry a name prefix, or an exact name with a leading '='.
bool nccl_matches(const std::string& name, const std::vector<std::string>& list, bool exact) {
  return std::any_of(list.begin(), list.end(), [&](const std::string& e) { return exact ? name == e : starts_with(name, e); });
}

/// The first up interface (with an address) matching NCCL_SOCKET_IFNAME-style `spec`.
std::string nccl_first(const std::vector<NetInterface>& ifs, std::string spec) {
  bool exclude = false, exact = false;
  if (!spec.empty() && spec[0] == '^') {
    exclude = true;
    spec.erase(0, 1);
  }
  if (!spec.empty() && spec[0] == '=') {
    exact = true;
    spec.erase(0, 1);
  }
  const std::vector<std::string> list = split_commas(spec);
  for (const auto& i : ifs) {
    if (!i.up || i.addrs.empty()) continue;
    if (nccl_matches(i.name, list, exact) != exclude) return i.name;
  }
  return "";
}

}  // namespace

NetProbe probe_network() {
  NetProbe p;
  p.env = {env_or_empty("OMPI_MCA_btl_tcp_if_include"), env_or_empty("OMPI_MCA_btl_tcp_if_exclude"),
           env_or_empty("OMPI_MCA_oob_tcp_if_include"), env_or_empty("NCCL_SOCKET_IFNAME")};
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return p;
  std::map<std::string, size_t> index;  // name -> position in p.interfaces, in getifaddrs order
  for (ifaddrs* a = list; a; a = a->ifa_next) {
    if (!a->ifa_name) continue;
    auto [it, fresh] = index.emplace(a->ifa_name, p.interfaces.size());
    if (fresh) {
      NetInterface n;
      n.name = a->ifa_name;
      p.interfaces.push_back(n);
    }
    NetInterface& n = p.interfaces[it->second];
    n.up = (a->ifa_flags & IFF_UP) && (a->ifa_flags & IFF_RUNNING);
    n.loopback = a->ifa_flags & IFF_LOOPBACK;
    if (a->ifa_addr && a->ifa_addr->sa_family == AF_INET) {
      char buf[INET_ADDRSTRLEN] = {};
      const auto* sin = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
      inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof buf);
      int len = 0;
      if (a->ifa_netmask)
        len = __builtin_popcount(reinterpret_cast<const sockaddr_in*>(a->ifa_netmask)->sin_addr.s_addr);
      n.addrs.push_back(std::string(buf) + "/" + std::to_string(len));
    }
  }
  freeifaddrs(list);
  return p;
}

std::vector<std::string> mpi_tcp_interfaces(const std::vector<NetInterface>& ifs, const NetSelectionEnv& env) {
  std::vector<std::string> out;
  const std::vector<std::string> inc = split_commas(env.btl_tcp_if_include);
  const std::vector<std::string> exc =
      split_commas(env.btl_tcp_if_exclude.empty() ? "127.0.0.1/8,sppp" : env.btl_tcp_if_exclude);
  for (const auto& i : ifs) {
    if (!i.up || i.addrs.empty()) continue;
    auto m = [&](const std::string& e) { return ompi_matches(i, e); };
    const bool take = inc.empty() ? std::none_of(exc.begin(), exc.end(), m) : std::any_of(inc.begin(), inc.end(), m);
    if (take) out.push_back(i.name);
  }
  return out;
}

std::string nccl_socket_interface(const std::vector<NetInterface>& ifs, const NetSelectionEnv& env) {
  if (!env.nccl_socket_ifname.empty()) return nccl_first(ifs, env.nccl_socket_ifname);
  for (const char* spec : {"ib", "^docker,lo", "docker", "lo"}) {
    std::string s = nccl_first(ifs, spec);
    if (!s.empty()) return s;
  }
  return "";
}

std::string describe_interfaces(const std::vector<NetInterface>& ifs) {
  std::ostringstream os;
  bool first = true;
  for (const auto& i : ifs) {
    os << (first ? "" : ", ") << i.name;
    for (const auto& a : i.addrs) os << " " << a;
    if (!i.up) os << " (down)";
    first = false;
  }
  return first ? "none" : os.str();
}

void to_json(nlohmann::json& j, const NetProbe& p) {
  j = nlohmann::json::object();
  j["interfaces"] = nlohmann::json::array();
  for (const auto& i : p.interfaces)
    j["interfaces"].push_back({{"name", i.name}, {"addrs", i.addrs}, {"up", i.up}, {"loopback", i.loopback}});
  j["env"] = {{"OMPI_MCA_btl_tcp_if_include", p.env.btl_tcp_if_include},
              {"OMPI_MCA_btl_tcp_if_exclude", p.env.btl_tcp_if_exclude},
              {"OMPI_MCA_oob_tcp_if_include", p.env.oob_tcp_if_include},
              {"NCCL_SOCKET_IFNAME", p.env.nccl_socket_ifname}};
}

void from_json(const nlohmann::json& j, NetProbe& p) {
  p.interfaces.clear();
  for (const auto& i : j.at("interfaces")) {
    NetInterface n;
    n.name = i.at("name").get<std::string>();
    n.addrs = i.at("addrs").get<std::vector<std::string>>();
    n.up = i.at("up").get<bool>();
    n.loopback = i.at("loopback").get<bool>();
    p.interfaces.push_back(std::move(n));
  }
  const auto& e = j.at("env");
  p.env = {e.at("OMPI_MCA_btl_tcp_if_include").get<std::string>(), e.at("OMPI_MCA_btl_tcp_if_exclude").get<std::string>(),
           e.at("OMPI_MCA_oob_tcp_if_include").get<std::string>(), e.at("NCCL_SOCKET_IFNAME").get<std::string>()};
}

}  // namespace ht
