#include "src/cli/doctor_analysis.hpp"

#include <algorithm>
#include <cctype>
#include <functional>
#include <iomanip>
#include <map>
#include <set>
#include <sstream>
#include <string>

namespace ht {
namespace {

std::string rank_list(const std::vector<int>& ranks) {
  std::ostringstream os;
  os << (ranks.size() == 1 ? "rank " : "ranks ");
  for (size_t i = 0; i < ranks.size(); ++i) os << (i ? ", " : "") << ranks[i];
  return os.str();
}

using Groups = std::map<std::string, std::vector<int>>;  ///< value -> ranks with it

Groups group_by(const std::vector<RankReport>& reps, const std::function<std::string(const RankReport&)>& key) {
  Groups m;
  for (const auto& r : reps) m[key(r)].push_back(r.rank);
  return m;
}

/// "ranks 0, 1: value; rank 2: other value".
std::string describe_groups(const Groups& groups) {
  std::ostringstream os;
  bool first = true;
  for (const auto& [v, ranks] : groups) {
    os << (first ? "" : "; ") << rank_list(ranks) << ": " << v;
    first = false;
  }
  return os.str();
}

std::string who(const RankReport& r) { return "rank " + std::to_string(r.rank); }

void gpu_problems(const std::vector<RankReport>& reps, bool want_gpu, std::vector<Problem>& ps) {
  // Visibility, grouped by host and diagnosis.
  Groups bad;
  std::map<std::string, std::string> fix;
  for (const auto& r : reps) {
    if (r.gpu.ok()) continue;
    std::string key = r.host + "\n" + r.gpu.summary;
    bad[key].push_back(r.rank);
    fix[key] = r.gpu.fix;
  }
  for (const auto& [key, ranks] : bad) {
    std::string host = key.substr(0, key.find('\n')), what = key.substr(key.find('\n') + 1);
    ps.push_back({want_gpu ? Severity::error : Severity::warning, "gpu", rank_list(ranks) + " on " + host + ": " + what,
                  // Checking a GPU run where there is none: say how to check the CPU run instead.
                  want_gpu ? fix[key] + "; to check a CPU run here instead: hpctrain doctor --device cpu"
                           : fix[key] + " (only needed for train.device = cuda)"});
  }
  // A driver of the same major version but an older minor one than the runtime still runs (CUDA minor
  // version compatibility) unless a kernel needs PTX JIT compilation to a newer ISA.
  for (const auto& r : reps) {
    int drv = r.gpu.driver_version, rt = r.gpu.runtime_version;
    if (r.gpu.ok() && drv > 0 && rt > 0 && drv / 1000 == rt / 1000 && drv < rt) {
      ps.push_back({Severity::warning, "gpu",
                    who(r) + ": driver supports CUDA " + cuda_version_string(drv) + ", older than the CUDA " +
                        cuda_version_string(rt) + " runtime (works through minor version compatibility, PTX JIT excepted)",
                    "update the NVIDIA driver to one for CUDA " + cuda_version_string(rt) + " or newer"});
      break;
    }
  }
}

void binding_problems(const std::vector<RankReport>& reps, const DoctorOptions& o, BindingPlan& plan,
                      std::vector<Problem>& ps) {
  std::vector<RankGpus> rg;
  bool any_gpu = false;
  for (const auto& r : reps) {
    RankGpus x;
    x.host = r.host;
    for (const auto& dev : r.gpu.devices) x.visible_uuids.push_back(dev.uuid);
    any_gpu |= !x.visible_uuids.empty();
    rg.push_back(std::move(x));
  }
  plan = plan_binding(rg);
  if (!any_gpu || o.device != DoctorDevice::cuda) return;  // only meaningful when some rank sees a GPU
  for (const auto& is : plan.issues) {
    if (is.kind == BindingIssue::Kind::kNoGpu) continue;  // reported as visibility
    ps.push_back({o.allow_shared_gpu ? Severity::warning : Severity::error, "binding", is.message, is.fix});
  }
}

void lib_problems(const std::vector<RankReport>& reps, const char* lib, std::vector<Problem>& ps) {
  const bool is_cudnn = std::string(lib) == "cudnn";
  const std::string name = is_cudnn ? "cuDNN" : "NCCL";
  auto version = [&](const RankReport& r) -> const LibVersion& { return is_cudnn ? r.cudnn : r.nccl; };
  Groups groups = group_by(reps, [&](const RankReport& r) {
    return lib_version_string(version(r).runtime) + " (built with " + lib_version_string(version(r).built) + ")";
  });
  const std::string fix = "put the " + name + " the build used first on LD_LIBRARY_PATH (module load / the same "
                          "container on every node), or rebuild hpctrain against the installed one";
  for (const auto& r : reps) {  // one line per library is enough; the per-rank versions are in the table/JSON
    const long built = version(r).built, rt = version(r).runtime;
    const std::string at = who(r) + " on " + r.host + ": " + name;
    if (built == 0 && rt == 0) continue;  // CPU-only build: reported as "not built with CUDA"
    if (rt < 0) {
      ps.push_back({Severity::error, lib,
                    at + " library not found at run time (built with " + lib_version_string(built) + ")", fix});
    } else if (built > 0 && lib_major(rt) != lib_major(built)) {
      ps.push_back({Severity::error, lib,
                    at + " " + lib_version_string(rt) + " at run time, built with " + lib_version_string(built) +
                        " (different major version)",
                    fix});
    } else if (built > 0 && rt < built) {
      ps.push_back({Severity::error, lib,
                    at + " " + lib_version_string(rt) + " at run time is older than the " +
                        lib_version_string(built) + " hpctrain was built with",
                    fix});
    } else {
      continue;
    }
    break;
  }
  if (groups.size() > 1)
    ps.push_back({Severity::error, lib, "ranks load different " + name + " versions: " + describe_groups(groups),
                  "use the same software environment on every node"});
}

void identity_problems(const std::vector<RankReport>& reps, std::vector<Problem>& ps) {
  // MPI library and executable identical on every rank.
  Groups mpi = group_by(reps, [](const RankReport& r) { return r.mpi_library.substr(0, r.mpi_library.find('\n')); });
  if (mpi.size() > 1)
    ps.push_back({Severity::error, "mpi", "ranks run different MPI libraries: " + describe_groups(mpi),
                  "load the same MPI module on every node; mpirun and the library it launches must match"});
  Groups exe = group_by(reps, [](const RankReport& r) { return "binary " + r.exe_hash + " on " + r.host; });
  std::set<std::string> hashes;
  for (const auto& r : reps) hashes.insert(r.exe_hash);
  if (hashes.size() > 1)
    ps.push_back({Severity::error, "binary", "ranks run different hpctrain executables: " + describe_groups(exe),
                  "install hpctrain on a shared file system (or the same image on every node) and rebuild"});

  // HDF5: run-time library equal to the headers; the same everywhere.
  for (const auto& r : reps)
    if (r.hdf5_built != r.hdf5_runtime) {
      ps.push_back({Severity::error, "hdf5",
                    who(r) + ": HDF5 " + r.hdf5_runtime + " at run time, built with " + r.hdf5_built +
                        " (HDF5 refuses to run with mismatched headers)",
                    "load the HDF5 hpctrain was built with (LD_LIBRARY_PATH / module), or rebuild"});
      break;
    }
  Groups h5 = group_by(reps, [](const RankReport& r) { return "HDF5 " + r.hdf5_runtime; });
  if (h5.size() > 1)
    ps.push_back({Severity::error, "hdf5", "ranks load different HDF5 versions: " + describe_groups(h5),
                  "use the same software environment on every node"});
}

void run_dir_problems(const std::vector<RankReport>& reps, const DoctorOptions& o, std::vector<Problem>& ps) {
  std::set<std::string> seen_hosts;  // once per host: ranks on one host share the file system
  for (const auto& r : reps) {
    if (!seen_hosts.insert(r.host).second) continue;
    const RunDirProbe& rd = r.run_dir;
    const std::string where = "run directory " + rd.path + " on host " + r.host;
    if (rd.network) {
      const std::string lock = r.hdf5_use_file_locking.value_or("");
      std::string up = lock;
      std::transform(up.begin(), up.end(), up.begin(), ::toupper);
      if (up != "FALSE" && up != "BEST_EFFORT")
        ps.push_back({Severity::error, "hdf5",
                      where + " is on " + rd.fs + " (a network file system) and HDF5 file locking is on "
                      "(HDF5_USE_FILE_LOCKING " + (lock.empty() ? "unset" : "=" + lock) +
                      "): opening files can fail with 'unable to lock file' or hang",
                      "export HDF5_USE_FILE_LOCKING=FALSE (hpctrain writes checkpoints from rank 0 only, "
                      "through a temporary name and a rename, so it needs no locks)"});
    }
    if (rd.free_bytes >= 0 && rd.free_bytes < o.min_free_gb * (1ull << 30)) {
      std::ostringstream os;
      os << where << " has " << std::fixed << std::setprecision(2) << rd.free_bytes / (1ull << 30) << " GiB free (< "
         << o.min_free_gb << " GiB)";
      ps.push_back({Severity::error, "disk", os.str(),
                    "free space, point --run.dir at a larger file system (scratch), or lower checkpoint.keep_last"});
    }
    if (!rd.writable)
      ps.push_back({Severity::error, "disk", where + ": " + rd.checked_path + " is not writable",
                    "choose a run directory this user can write to"});
  }
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s.empty() ? "none" : s;
}

/// Whether some entry of a comma-separated Open MPI interface list is a name `ifs` lacks (subnets
/// are not names: they select by address).
std::string missing_name(const std::string& list, const std::vector<NetInterface>& ifs) {
  std::stringstream ss(list);
  std::string e;
  while (std::getline(ss, e, ','))
    if (!e.empty() && !std::isdigit(static_cast<unsigned char>(e[0])) &&
        std::none_of(ifs.begin(), ifs.end(), [&](const NetInterface& i) { return i.name == e; }))
      return e;
  return "";
}

/// Once per host (its first rank's view): the interfaces Open MPI's TCP transport and NCCL would use.
/// Only across hosts: on one host the ranks talk through shared memory.
void network_problems(const std::vector<RankReport>& reps, std::vector<Problem>& ps) {
  std::set<std::string> hosts, seen;
  for (const auto& r : reps) hosts.insert(r.host);
  if (hosts.size() < 2) return;
  const std::string choose = "choose the interface that reaches the other nodes: export "
                             "OMPI_MCA_btl_tcp_if_include=IF OMPI_MCA_oob_tcp_if_include=IF (mpirun -x, or the job's "
                             "environment under srun) and NCCL_SOCKET_IFNAME=IF";
  for (const auto& r : reps) {
    if (!seen.insert(r.host).second || r.net.interfaces.empty()) continue;  // empty: not probed
    const NetSelectionEnv& e = r.net.env;
    const std::vector<std::string> mpi = mpi_tcp_interfaces(r.net.interfaces, e);
    const std::string nccl = nccl_socket_interface(r.net.interfaces, e);
    const std::string on = "host " + r.host + " (interfaces " + describe_interfaces(r.net.interfaces) + ")";
    for (const auto& [var, val] : {std::pair<std::string, std::string>{"OMPI_MCA_btl_tcp_if_include", e.btl_tcp_if_include},
                                   {"OMPI_MCA_oob_tcp_if_include", e.oob_tcp_if_include}}) {
      const std::string m = missing_name(val, r.net.interfaces);
      if (!m.empty())
        ps.push_back({Severity::error, "network", var + "=" + val + " names '" + m + "', which " + on + " lacks", choose});
    }
    if (mpi.empty())
      ps.push_back({Severity::error, "network", on + ": no interface for MPI's TCP transport", choose});
    else if (mpi.size() > 1 && e.btl_tcp_if_include.empty() && e.btl_tcp_if_exclude.empty())
      ps.push_back({Severity::warning, "network",
                    on + ": MPI's TCP transport would stripe over " + join(mpi) + " and NCCL would use " +
                        (nccl.empty() ? "none" : nccl) + "; a run stalls or fails if one of them does not reach the other nodes",
                    choose});
    if (r.nccl.built > 0 && nccl.empty())
      ps.push_back({Severity::error, "network",
                    on + ": no interface matches NCCL_SOCKET_IFNAME=" + (e.nccl_socket_ifname.empty() ? "(unset)" : e.nccl_socket_ifname),
                    choose});
  }
}

}  // namespace

Analysis analyse(const std::vector<RankReport>& reports, const DoctorOptions& o) {
  Analysis a;
  gpu_problems(reports, o.device == DoctorDevice::cuda, a.problems);
  binding_problems(reports, o, a.plan, a.problems);
  lib_problems(reports, "cudnn", a.problems);
  lib_problems(reports, "nccl", a.problems);
  identity_problems(reports, a.problems);
  run_dir_problems(reports, o, a.problems);
  network_problems(reports, a.problems);
  return a;
}

bool nccl_check_possible(const std::vector<RankReport>& reports, const BindingPlan& plan, bool real_gpus) {
  bool shared = false;
  for (const auto& is : plan.issues) shared |= is.kind != BindingIssue::Kind::kNoGpu;
  return real_gpus && !shared && std::all_of(plan.device.begin(), plan.device.end(), [](int x) { return x >= 0; }) &&
         !reports.empty() && reports[0].nccl.built > 0;
}

std::vector<Problem> allreduce_problems(const std::vector<AllreduceResult>& results, bool nccl_attempted) {
  std::vector<Problem> ps;
  for (const auto& a : results) {
    if (a.error.empty() && !a.correct)
      ps.push_back({Severity::error, "allreduce", a.backend + " allreduce gave a wrong sum",
                    "run the MPI/NCCL tests (osu_allreduce, nccl-tests) and check the interconnect"});
    if (a.backend == "NCCL" && !a.error.empty() && nccl_attempted)
      ps.push_back({Severity::error, "allreduce", "NCCL allreduce failed: " + a.error, "rerun with NCCL_DEBUG=INFO"});
  }
  return ps;
}

}  // namespace ht
