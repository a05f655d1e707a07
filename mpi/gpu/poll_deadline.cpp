// Host-side timeout helpers for GPU collectives (see poll_deadline.hpp); built in every build.
#include "mpi/gpu/poll_deadline.hpp"

#include <algorithm>
#include <cstring>
#include <sstream>

extern char** environ;

namespace ht {

std::string nccl_settings_text(char** env) {
  std::vector<std::string> vars;
  for (char** e = env; e && *e; ++e)
    if (std::strncmp(*e, "NCCL_", 5) == 0) vars.emplace_back(*e);
  if (vars.empty()) return "(no NCCL_* variables set)";
  std::sort(vars.begin(), vars.end());
  std::string out;
  for (const auto& v : vars) out += (out.empty() ? "" : " ") + v;
  return out;
}

std::string nccl_settings_text() { return nccl_settings_text(environ); }

std::string nccl_timeout_message(int rank, const std::string& host, const std::string& operation, double timeout_s,
                                 const std::string& nccl_settings, const std::string& probe_result) {
  std::ostringstream os;
  os << "NCCL " << operation << " on rank " << rank << " (" << host << ") did not complete within " << timeout_s
     << " s (dist.timeout_s); the NCCL communicator was aborted; " << probe_result
     << ". A peer rank may have failed or stalled, or the "
        "network between the GPUs does not carry NCCL traffic. NCCL settings in effect: "
     << nccl_settings
     << ". Rerun with NCCL_DEBUG=INFO (and NCCL_DEBUG_SUBSYS=INIT,NET) to see where NCCL stops, and run "
        "'hpctrain doctor' on every node.";
  return os.str();
}

}  // namespace ht
