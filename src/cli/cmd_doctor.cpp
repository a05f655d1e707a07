// hpctrain doctor: per-rank environment diagnosis. Every rank probes its own environment (GPU driver
// and devices, the GPU it would bind, cuDNN/NCCL/MPI/HDF5 versions, its binary, the run directory's
// file system), rank 0 gathers the reports, prints one table and the list of problems, each with its
// likely fix, then all ranks run a small allreduce (MPI, and NCCL in CUDA builds with GPUs).
//
// Exit code: 0 when no problem of severity "error" was found, 1 otherwise; every rank returns the same.
// By default the checks are those of a GPU run (--device cuda): a rank without a usable GPU is an error,
// so on a machine without GPUs doctor reports the reason and exits 1. --device cpu checks a CPU run:
// the GPU section is then informational.
//
// Test hooks (environment variables; used by tests/doctor/*, never needed by users). A value containing
// ';' is a per-rank list (rank r takes entry r), otherwise it applies to every rank:
//   HT_DOCTOR_FAKE_GPU_UUIDS     the visible GPUs, comma-separated UUIDs ("GPU-aaa,GPU-aaa"; "none" = no GPU)
//   HT_DOCTOR_FAKE_HOSTS         host names (pretend ranks run on different hosts)
//   HT_DOCTOR_FAKE_CUDNN_VERSION RUNTIME[/BUILT] with RUNTIME an integer (90100) or "missing"
//   HT_DOCTOR_FAKE_NCCL_VERSION  the same for NCCL (21803)
//   HT_DOCTOR_FAKE_HDF5_VERSION  run-time HDF5 version "1.10.7"
//   HT_DOCTOR_FAKE_MPI_VERSION   MPI library version string
//   HT_DOCTOR_FAKE_EXE_HASH      hash of the executable
//   HT_DOCTOR_FAKE_FSTYPE        file system of the run directory (nfs, lustre, gpfs, ext4, ...)
//   HT_DOCTOR_FAKE_FREE_BYTES    free bytes in the run directory
// and HT_LIBCUDA / HT_LIBNVML (cuda/gpu_env.hpp) to load a fake driver library.
#include <hdf5.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <functional>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <set>
#include <span>
#include <sstream>

#include "cuda/binding_plan.hpp"
#include "cuda/check.hpp"
#include "mpi/check.hpp"
#include "cuda/cuda_context.hpp"
#include "cuda/gpu_env.hpp"
#include "mpi/communicator.hpp"
#include "mpi/gpu/nccl_communicator.hpp"
#include "mpi/dist.hpp"
#include "src/cli/commands.hpp"
#include "src/base/error.hpp"

namespace ht {
namespace {

using nlohmann::json;

struct Options {
  std::string run_dir = "runs";
  std::string device = "cuda";
  bool allow_shared_gpu = false;
  double allreduce_mb = 4;
  double min_free_gb = 2;
  double timeout_s = 60;  ///< time limit of NCCL initialisation and of each allreduce
  std::string json_path;
};

void print_help() {
  std::cout << "usage: hpctrain doctor [--run-dir DIR] [--device cuda|cpu] [--allow-shared-gpu]\n"
               "                      [--allreduce-mb MB] [--min-free-gb GB] [--timeout-s S] [--json FILE]\n"
               "Run under the same launcher as training (mpirun -np 8 hpctrain doctor). Each rank reports\n"
               "its host, local rank and the GPU it would bind; rank 0 prints one table and every problem\n"
               "found with its likely fix. Exit code 0: no problem; 1: at least one problem.\n"
               "  --run-dir DIR       run directory to check (free space, file system, locking); default runs\n"
               "  --device cuda|cpu   checks for a GPU run (default; no GPU is a problem) or a CPU run\n"
               "  --allow-shared-gpu  several ranks on one GPU is intended (as --dist.allow_shared_gpu)\n"
               "  --allreduce-mb MB   size of the test allreduce (default 4)\n"
               "  --min-free-gb GB    less free space than this in the run directory is a problem (default 2)\n"
               "  --timeout-s S       time limit of NCCL initialisation and of each test allreduce (default 60)\n"
               "  --json FILE         also write the full report as JSON (rank 0)\n";
}

Options parse_options(const Args& args) {
  Options o;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) throw UsageError("hpctrain doctor: option " + a + " needs a value");
      return args[++i];
    };
    auto number = [&](const std::string& v) {
      try {
        size_t pos = 0;
        double d = std::stod(v, &pos);
        if (pos != v.size() || !(d >= 0)) throw std::invalid_argument(v);
        return d;
      } catch (const std::exception&) {
        throw UsageError("hpctrain doctor: option " + a + ": '" + v + "' is not a non-negative number");
      }
    };
    if (a == "--run-dir") o.run_dir = value();
    else if (a == "--device") {
      o.device = value();
      if (o.device != "cuda" && o.device != "cpu")
        throw UsageError("hpctrain doctor: option --device: '" + o.device + "' is not cuda or cpu");
    } else if (a == "--allow-shared-gpu") o.allow_shared_gpu = true;
    else if (a == "--allreduce-mb") o.allreduce_mb = number(value());
    else if (a == "--min-free-gb") o.min_free_gb = number(value());
    else if (a == "--timeout-s") o.timeout_s = number(value());
    else if (a == "--json") o.json_path = value();
    else throw UsageError("hpctrain doctor: unknown option '" + a + "' (see hpctrain doctor --help)");
  }
  return o;
}

// ---- test hooks ---------------------------------------------------------------------------------
std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream is(s);
  while (std::getline(is, cur, sep)) out.push_back(cur);
  if (!s.empty() && s.back() == sep) out.emplace_back();
  return out;
}

/// The fake value for this rank, or nullopt when the hook is unset.
std::optional<std::string> fake(const char* name, int rank) {
  const char* v = std::getenv(name);
  if (!v) return std::nullopt;
  std::string s = v;
  if (s.find(';') == std::string::npos) return s;
  auto parts = split(s, ';');
  if (rank < static_cast<int>(parts.size())) return parts[static_cast<size_t>(rank)];
  return std::string();
}

// ---- version helpers ----------------------------------------------------------------------------
/// cuDNN and NCCL encode versions as major*10000+minor*100+patch (cuDNN 9, NCCL >= 2.9) or
/// major*1000+minor*100+patch (cuDNN 8, older NCCL).
std::string lib_version_string(long v) {
  if (v < 0) return "missing";
  if (v == 0) return "none";
  long major = v >= 10000 ? v / 10000 : v / 1000;
  long minor = v >= 10000 ? (v % 10000) / 100 : (v % 1000) / 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(v % 100);
}
long lib_major(long v) { return v >= 10000 ? v / 10000 : v / 1000; }

/// (built, runtime): built 0 = not built with it; runtime -1 = library missing at run time, 0 = none.
struct LibVersion {
  long built = 0;
  long runtime = 0;
};

LibVersion apply_lib_fake(LibVersion v, const char* hook, int rank) {
  auto f = fake(hook, rank);
  if (!f) return v;
  auto parts = split(*f, '/');
  auto parse = [&](const std::string& s) -> long {
    if (s == "missing") return -1;
    try {
      return std::stol(s);
    } catch (const std::exception&) {
      throw UsageError(std::string("test hook ") + hook + ": '" + s + "' is not an integer or 'missing'");
    }
  };
  if (!parts.empty()) v.runtime = parse(parts[0]);
  if (parts.size() > 1) v.built = parse(parts[1]);
  return v;
}

LibVersion cudnn_version(int rank) {
  LibVersion v;
#if defined(HT_HAVE_CUDA)
  v.built = CUDNN_VERSION;
  v.runtime = static_cast<long>(cudnnGetVersion());
#endif
  return apply_lib_fake(v, "HT_DOCTOR_FAKE_CUDNN_VERSION", rank);
}

LibVersion nccl_version(int rank) {
  LibVersion v;
#if defined(HT_HAVE_CUDA)
  v.built = NCCL_VERSION_CODE;
  int rt = 0;
  v.runtime = ncclGetVersion(&rt) == ncclSuccess ? rt : -1;
#endif
  return apply_lib_fake(v, "HT_DOCTOR_FAKE_NCCL_VERSION", rank);
}

/// FNV-1a 64 of the running executable: ranks running different builds get different hashes.
std::string exe_hash() {
  std::ifstream f("/proc/self/exe", std::ios::binary);
  if (!f) return "unreadable";
  uint64_t h = 1469598103934665603ull;
  std::vector<char> buf(1 << 20);
  while (f) {
    f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    for (std::streamsize i = 0; i < f.gcount(); ++i) {
      h ^= static_cast<unsigned char>(buf[static_cast<size_t>(i)]);
      h *= 1099511628211ull;
    }
  }
  char out[32];
  std::snprintf(out, sizeof(out), "%016llx", static_cast<unsigned long long>(h));
  return out;
}

/// Network and parallel file systems where HDF5's default file locking (flock/fcntl) fails or hangs.
std::string fs_name(long type, bool* network) {
  struct Known { unsigned long magic; const char* name; bool network; };
  static const Known known[] = {
      {0x6969, "nfs", true},          {0x0BD00BD0, "lustre", true},   {0x47504653, "gpfs", true},
      {0xFF534D42, "cifs", true},     {0xFE534D42, "smb2", true},     {0x517B, "smb", true},
      {0x19830326, "beegfs", true},   {0x00C36400, "ceph", true},     {0xAAD7AAEA, "panfs", true},
      {0x20030528, "orangefs", true}, {0x5346414F, "afs", true},      {0x65735546, "fuse", true},
      {0xEF53, "ext4", false},        {0x58465342, "xfs", false},     {0x9123683E, "btrfs", false},
      {0x01021994, "tmpfs", false},   {0x794C7630, "overlayfs", false}, {0x2FC12FC1, "zfs", false}};
  for (const auto& k : known)
    if (static_cast<unsigned long>(type) == k.magic) {
      *network = k.network;
      return k.name;
    }
  *network = false;
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%lx", static_cast<unsigned long>(type));
  return buf;
}

// ---- one rank's report --------------------------------------------------------------------------
json probe_rank(const Options& o, const DistContext& d) {
  json r;
  r["rank"] = d.rank;
  r["host"] = fake("HT_DOCTOR_FAKE_HOSTS", d.rank).value_or(d.host);
  r["pid"] = static_cast<long>(getpid());

  // GPU environment through the driver API; a fake UUID list replaces the devices.
  GpuEnv env = probe_gpu_env();
  if (auto f = fake("HT_DOCTOR_FAKE_GPU_UUIDS", d.rank)) {
    env.devices.clear();
    env.driver_loaded = true;
    env.load_error.clear();
    env.visible_devices_set = false;
    env.init_result = 0;
    env.init_error.clear();
    if (env.driver_version == 0) env.driver_version = env.runtime_version > 0 ? env.runtime_version : 12000;
    int i = 0;
    for (const auto& u : split(*f, ',')) {
      if (u.empty() || u == "none") continue;
      GpuDevice g;
      g.ordinal = i++;
      g.name = "fake GPU";
      g.uuid = u;
      env.devices.push_back(g);
    }
  }
  GpuDiagnosis diag = diagnose_gpu_env(env);
  json g;
  g["status"] = gpu_status_name(diag.status);
  g["ok"] = diag.status == GpuStatus::kOk;
  g["summary"] = diag.summary;
  g["fix"] = diag.fix;
  g["driver_version"] = env.driver_version;
  g["runtime_version"] = env.runtime_version;
  g["cuda_visible_devices"] = env.visible_devices_set ? json(env.visible_devices) : json(nullptr);
  g["devices"] = json::array();
  for (const auto& dev : env.devices)
    g["devices"].push_back({{"ordinal", dev.ordinal}, {"name", dev.name}, {"uuid", dev.uuid},
                            {"memory_bytes", dev.total_memory_bytes}, {"cc", std::to_string(dev.cc_major) + "." +
                                                                                std::to_string(dev.cc_minor)},
                            {"pci_bus_id", dev.pci_bus_id}});
  r["gpu"] = g;

  LibVersion cudnn = cudnn_version(d.rank), nccl = nccl_version(d.rank);
  r["cudnn"] = {{"built", cudnn.built}, {"runtime", cudnn.runtime}};
  r["nccl"] = {{"built", nccl.built}, {"runtime", nccl.runtime}};

  char mpi_lib[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0;
  HT_MPI_CHECK(MPI_Get_library_version(mpi_lib, &len));
  std::string mpi_str(mpi_lib, static_cast<size_t>(len));
  while (!mpi_str.empty() && (mpi_str.back() == '\n' || mpi_str.back() == '\0')) mpi_str.pop_back();
  r["mpi_library"] = fake("HT_DOCTOR_FAKE_MPI_VERSION", d.rank).value_or(mpi_str);
  int mv = 0, msub = 0;
  MPI_Get_version(&mv, &msub);
  r["mpi_standard"] = std::to_string(mv) + "." + std::to_string(msub);
  r["exe_hash"] = fake("HT_DOCTOR_FAKE_EXE_HASH", d.rank).value_or(exe_hash());

  unsigned maj = 0, min = 0, rel = 0;
  H5get_libversion(&maj, &min, &rel);
  r["hdf5_built"] = std::to_string(H5_VERS_MAJOR) + "." + std::to_string(H5_VERS_MINOR) + "." +
                    std::to_string(H5_VERS_RELEASE);
  r["hdf5_runtime"] = fake("HT_DOCTOR_FAKE_HDF5_VERSION", d.rank)
                          .value_or(std::to_string(maj) + "." + std::to_string(min) + "." + std::to_string(rel));
  const char* lock = std::getenv("HDF5_USE_FILE_LOCKING");
  r["hdf5_use_file_locking"] = lock ? json(lock) : json(nullptr);

  // Run directory: the nearest existing ancestor tells the file system and free space.
  namespace fs = std::filesystem;
  fs::path p = fs::absolute(o.run_dir);
  std::error_code ec;
  while (!fs::exists(p, ec) && p.has_parent_path() && p != p.parent_path()) p = p.parent_path();
  json rd;
  rd["path"] = o.run_dir;
  rd["checked_path"] = p.string();
  rd["exists"] = fs::exists(fs::path(o.run_dir), ec);
  struct statfs sf {};
  if (statfs(p.c_str(), &sf) == 0) {
    bool network = false;
    rd["fs"] = fs_name(static_cast<long>(sf.f_type), &network);
    rd["network"] = network;
    rd["free_bytes"] = static_cast<double>(sf.f_bavail) * static_cast<double>(sf.f_bsize);
  } else {
    rd["fs"] = "unknown";
    rd["network"] = false;
    rd["free_bytes"] = -1.0;
  }
  if (auto f = fake("HT_DOCTOR_FAKE_FSTYPE", d.rank)) {
    static const std::set<std::string> net = {"nfs", "lustre", "gpfs", "cifs", "smb2", "smb", "beegfs",
                                              "ceph", "panfs", "orangefs", "afs", "fuse"};
    rd["fs"] = *f;
    rd["network"] = net.count(*f) > 0;
  }
  if (auto f = fake("HT_DOCTOR_FAKE_FREE_BYTES", d.rank)) rd["free_bytes"] = std::atof(f->c_str());
  rd["writable"] = access(p.c_str(), W_OK) == 0;
  r["run_dir"] = rd;
  return r;
}

/// Gathers each rank's JSON report to rank 0 (empty vector elsewhere).
std::vector<json> gather_reports(const json& mine, const DistContext& d) {
  std::string s = mine.dump();
  int len = static_cast<int>(s.size());
  std::vector<int> lens(static_cast<size_t>(d.world_size)), displs(static_cast<size_t>(d.world_size));
  HT_MPI_CHECK(MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, d.world));
  int total = 0;
  for (int r = 0; r < d.world_size; ++r) {
    displs[r] = total;
    total += lens[r];
  }
  std::vector<char> all(d.rank == 0 ? static_cast<size_t>(total) : 0);
  HT_MPI_CHECK(MPI_Gatherv(s.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, 0, d.world));
  std::vector<json> out;
  if (d.rank == 0)
    for (int r = 0; r < d.world_size; ++r)
      out.push_back(json::parse(std::string(all.data() + displs[r], static_cast<size_t>(lens[r]))));
  return out;
}

// ---- analysis (rank 0) --------------------------------------------------------------------------
struct Problem {
  std::string severity;  ///< "error" (counts for the exit code) or "warning"
  std::string area;
  std::string what;
  std::string fix;
};

std::string rank_list(const std::vector<int>& ranks) {
  std::ostringstream os;
  os << (ranks.size() == 1 ? "rank " : "ranks ");
  for (size_t i = 0; i < ranks.size(); ++i) os << (i ? ", " : "") << ranks[i];
  return os.str();
}

/// Groups ranks by a value: "value -> ranks".
std::map<std::string, std::vector<int>> group_by(const std::vector<json>& reps,
                                                 const std::function<std::string(const json&)>& key) {
  std::map<std::string, std::vector<int>> m;
  for (const auto& r : reps) m[key(r)].push_back(r["rank"].get<int>());
  return m;
}

/// The ranks' hosts per group, e.g. "ranks 0, 1 (host a)".
std::string describe_groups(const std::map<std::string, std::vector<int>>& groups) {
  std::ostringstream os;
  bool first = true;
  for (const auto& [v, ranks] : groups) {
    os << (first ? "" : "; ") << rank_list(ranks) << ": " << v;
    first = false;
  }
  return os.str();
}

std::vector<Problem> analyse(const std::vector<json>& reps, const Options& o, BindingPlan* plan_out) {
  std::vector<Problem> ps;
  const bool want_gpu = o.device == "cuda";

  // GPU visibility, grouped by diagnosis.
  std::map<std::string, std::vector<int>> gpu_bad;
  std::map<std::string, std::string> gpu_fix;
  for (const auto& r : reps) {
    if (r["gpu"]["ok"].get<bool>()) continue;
    std::string key = r["host"].get<std::string>() + "\n" + r["gpu"]["summary"].get<std::string>();
    gpu_bad[key].push_back(r["rank"].get<int>());
    gpu_fix[key] = r["gpu"]["fix"].get<std::string>();
  }
  for (const auto& [key, ranks] : gpu_bad) {
    std::string host = key.substr(0, key.find('\n')), what = key.substr(key.find('\n') + 1);
    ps.push_back({want_gpu ? "error" : "warning", "gpu", rank_list(ranks) + " on " + host + ": " + what,
                  want_gpu ? gpu_fix[key] : gpu_fix[key] + " (only needed for train.device = cuda)"});
  }
  // A driver of the same major version but an older minor one than the runtime still runs (CUDA minor
  // version compatibility) unless a kernel needs PTX JIT compilation to a newer ISA.
  for (const auto& r : reps) {
    int drv = r["gpu"]["driver_version"], rt = r["gpu"]["runtime_version"];
    if (r["gpu"]["ok"].get<bool>() && drv > 0 && rt > 0 && drv / 1000 == rt / 1000 && drv < rt) {
      ps.push_back({"warning", "gpu",
                    "rank " + std::to_string(r["rank"].get<int>()) + ": driver supports CUDA " +
                        cuda_version_string(drv) + ", older than the CUDA " + cuda_version_string(rt) +
                        " runtime (works through minor version compatibility, PTX JIT excepted)",
                    "update the NVIDIA driver to one for CUDA " + cuda_version_string(rt) + " or newer"});
      break;
    }
  }

  // Binding: only meaningful when some rank sees a GPU.
  std::vector<RankGpus> rg;
  bool any_gpu = false;
  for (const auto& r : reps) {
    RankGpus x;
    x.host = r["host"];
    for (const auto& dev : r["gpu"]["devices"]) x.visible_uuids.push_back(dev["uuid"]);
    any_gpu |= !x.visible_uuids.empty();
    rg.push_back(std::move(x));
  }
  *plan_out = plan_binding(rg);
  if (any_gpu && want_gpu) {
    for (const auto& is : plan_out->issues) {
      if (is.kind == BindingIssue::Kind::kNoGpu) continue;  // reported as visibility above
      ps.push_back({o.allow_shared_gpu ? "warning" : "error", "binding", is.message, is.fix});
    }
  }

  // cuDNN and NCCL against the versions built with.
  for (const char* lib : {"cudnn", "nccl"}) {
    const std::string name = std::string(lib) == "cudnn" ? "cuDNN" : "NCCL";
    auto groups = group_by(reps, [&](const json& r) {
      return lib_version_string(r[lib]["runtime"].get<long>()) + " (built with " +
             lib_version_string(r[lib]["built"].get<long>()) + ")";
    });
    for (const auto& r : reps) {
      long built = r[lib]["built"], rt = r[lib]["runtime"];
      std::string who = "rank " + std::to_string(r["rank"].get<int>()) + " on " + r["host"].get<std::string>();
      std::string fix = "put the " + name + " the build used first on LD_LIBRARY_PATH (module load / the same "
                        "container on every node), or rebuild hpctrain against the installed one";
      if (built == 0 && rt == 0) continue;  // CPU-only build: reported as "not built with CUDA"
      if (rt < 0) {
        ps.push_back({"error", lib, who + ": " + name + " library not found at run time (built with " +
                                         lib_version_string(built) + ")", fix});
      } else if (built > 0 && lib_major(rt) != lib_major(built)) {
        ps.push_back({"error", lib, who + ": " + name + " " + lib_version_string(rt) + " at run time, built with " +
                                         lib_version_string(built) + " (different major version)", fix});
      } else if (built > 0 && rt < built) {
        ps.push_back({"error", lib, who + ": " + name + " " + lib_version_string(rt) +
                                         " at run time is older than the " + lib_version_string(built) +
                                         " hpctrain was built with", fix});
      } else {
        continue;
      }
      break;  // one line per library is enough; the per-rank versions are in the table/JSON
    }
    if (groups.size() > 1)
      ps.push_back({"error", lib, "ranks load different " + name + " versions: " + describe_groups(groups),
                    "use the same software environment on every node"});
  }

  // MPI library and executable identical on every rank.
  auto mpi_groups = group_by(reps, [](const json& r) {
    std::string s = r["mpi_library"];
    return s.substr(0, s.find('\n'));
  });
  if (mpi_groups.size() > 1)
    ps.push_back({"error", "mpi", "ranks run different MPI libraries: " + describe_groups(mpi_groups),
                  "load the same MPI module on every node; mpirun and the library it launches must match"});
  auto exe_groups = group_by(reps, [](const json& r) {
    return "binary " + r["exe_hash"].get<std::string>() + " on " + r["host"].get<std::string>();
  });
  std::set<std::string> hashes;
  for (const auto& r : reps) hashes.insert(r["exe_hash"].get<std::string>());
  if (hashes.size() > 1)
    ps.push_back({"error", "binary", "ranks run different hpctrain executables: " + describe_groups(exe_groups),
                  "install hpctrain on a shared file system (or the same image on every node) and rebuild"});

  // HDF5: run-time library equal to the headers; the same everywhere.
  for (const auto& r : reps)
    if (r["hdf5_built"] != r["hdf5_runtime"]) {
      ps.push_back({"error", "hdf5",
                    "rank " + std::to_string(r["rank"].get<int>()) + ": HDF5 " + r["hdf5_runtime"].get<std::string>() +
                        " at run time, built with " + r["hdf5_built"].get<std::string>() +
                        " (HDF5 refuses to run with mismatched headers)",
                    "load the HDF5 hpctrain was built with (LD_LIBRARY_PATH / module), or rebuild"});
      break;
    }
  auto h5_groups = group_by(reps, [](const json& r) { return "HDF5 " + r["hdf5_runtime"].get<std::string>(); });
  if (h5_groups.size() > 1)
    ps.push_back({"error", "hdf5", "ranks load different HDF5 versions: " + describe_groups(h5_groups),
                  "use the same software environment on every node"});

  // Run directory, once per host.
  std::set<std::string> seen_hosts;
  for (const auto& r : reps) {
    std::string host = r["host"];
    if (!seen_hosts.insert(host).second) continue;
    const json& rd = r["run_dir"];
    std::string where = "run directory " + rd["path"].get<std::string>() + " on host " + host;
    if (rd["network"].get<bool>()) {
      std::string lock = r["hdf5_use_file_locking"].is_null() ? "" : r["hdf5_use_file_locking"].get<std::string>();
      std::string up = lock;
      std::transform(up.begin(), up.end(), up.begin(), ::toupper);
      if (up != "FALSE" && up != "BEST_EFFORT")
        ps.push_back({"error", "hdf5",
                      where + " is on " + rd["fs"].get<std::string>() + " (a network file system) and HDF5 file "
                      "locking is on (HDF5_USE_FILE_LOCKING " + (lock.empty() ? "unset" : "=" + lock) +
                      "): opening files can fail with 'unable to lock file' or hang",
                      "export HDF5_USE_FILE_LOCKING=FALSE (hpctrain writes checkpoints from rank 0 only, "
                      "through a temporary name and a rename, so it needs no locks)"});
    }
    double free_b = rd["free_bytes"];
    if (free_b >= 0 && free_b < o.min_free_gb * (1ull << 30)) {
      std::ostringstream os;
      os << where << " has " << std::fixed << std::setprecision(2) << free_b / (1ull << 30) << " GiB free (< "
         << o.min_free_gb << " GiB)";
      ps.push_back({"error", "disk", os.str(),
                    "free space, point --run.dir at a larger file system (scratch), or lower checkpoint.keep_last"});
    }
    if (!rd["writable"].get<bool>())
      ps.push_back({"error", "disk", where + ": " + rd["checked_path"].get<std::string>() + " is not writable",
                    "choose a run directory this user can write to"});
  }
  return ps;
}

// ---- allreduce checks ---------------------------------------------------------------------------
struct AllreduceResult {
  std::string backend;
  size_t count = 0;
  double ms = 0;          ///< average per allreduce, the slowest rank's
  double algbw_gbs = 0;   ///< bytes / time
  double busbw_gbs = 0;   ///< algbw * 2(n-1)/n, as nccl-tests reports
  bool correct = false;
  std::string error;
};

AllreduceResult mpi_allreduce_check(const Options& o, const DistContext& d) {
  AllreduceResult res;
  res.backend = "MPI";
  res.count = std::max<size_t>(1, static_cast<size_t>(o.allreduce_mb * (1 << 20) / sizeof(float)));
  std::vector<float> buf(res.count);
  const int iters = 5;
  double elapsed = 0;
  bool ok = true;
  for (int it = 0; it <= iters; ++it) {  // iteration 0 warms up
    std::fill(buf.begin(), buf.end(), static_cast<float>(d.rank + 1));
    HT_MPI_CHECK(MPI_Barrier(d.world));
    double t0 = MPI_Wtime();
    HT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(res.count), MPI_FLOAT, MPI_SUM, d.world));
    double t1 = MPI_Wtime();
    if (it > 0) elapsed += t1 - t0;
    const float want = static_cast<float>(d.world_size) * (d.world_size + 1) / 2.f;
    for (size_t i = 0; i < res.count; i += 997) ok &= buf[i] == want;
    ok &= buf.back() == want;
  }
  double avg = dist_max(static_cast<long long>(elapsed / iters * 1e9)) / 1e9;
  res.correct = !dist_any(!ok);
  res.ms = avg * 1e3;
  double bytes = static_cast<double>(res.count) * sizeof(float);
  res.algbw_gbs = avg > 0 ? bytes / avg / 1e9 : 0;
  res.busbw_gbs = d.world_size > 1 ? res.algbw_gbs * 2.0 * (d.world_size - 1) / d.world_size : 0;
  return res;
}

#if defined(HT_HAVE_CUDA)
/// NCCL allreduce on each rank's bound GPU, through the same time-limited communicator as training
/// (mpi/nccl_communicator.cu): initialisation and every collective end after `o.timeout_s`, so a
/// stalled rank or a misconfigured network gives an error naming the rank and the NCCL_* settings
/// instead of hanging the doctor. Local setup failures are agreed on first, so no rank enters NCCL
/// initialisation alone. Collective: every rank calls it.
AllreduceResult nccl_allreduce_check(const Options& o, const DistContext& d, int device) {
  AllreduceResult res;
  res.backend = "NCCL";
  res.count = std::max<size_t>(1, static_cast<size_t>(o.allreduce_mb * (1 << 20) / sizeof(float)));
  std::string err;
  try {
    cuda::init(device);
  } catch (const std::exception& e) {
    err = std::string("CUDA setup on device ") + std::to_string(device) + ": " + e.what();
  }
  if (dist_any(!err.empty())) {
    res.error = err.empty() ? "another rank failed to set up its GPU" : err;
    return res;
  }
  bool ok = false;
  double elapsed = 0;
  const int iters = 5;
  try {
    std::unique_ptr<Communicator> comm = make_nccl_communicator(o.timeout_s);
    float* dbuf = nullptr;
    HT_CUDA_CHECK(cudaMalloc(&dbuf, res.count * sizeof(float)));
    std::unique_ptr<float, void (*)(float*)> guard(dbuf, [](float* p) { cudaFree(p); });
    std::vector<float> host(res.count, static_cast<float>(d.rank + 1));
    std::span<float> data(dbuf, res.count);
    for (int it = 0; it <= iters; ++it) {
      HT_CUDA_CHECK(cudaMemcpy(dbuf, host.data(), res.count * sizeof(float), cudaMemcpyHostToDevice));
      HT_MPI_CHECK(MPI_Barrier(d.world));
      auto t0 = std::chrono::steady_clock::now();
      comm->allreduce_sum(data);  // blocking: returns after the sum is in dbuf (or throws on the limit)
      auto t1 = std::chrono::steady_clock::now();
      if (it > 0) elapsed += std::chrono::duration<double>(t1 - t0).count();
    }
    cuda::synchronize();
    std::vector<float> back(res.count);
    HT_CUDA_CHECK(cudaMemcpy(back.data(), dbuf, res.count * sizeof(float), cudaMemcpyDeviceToHost));
    const float want = static_cast<float>(d.world_size) * (d.world_size + 1) / 2.f;
    ok = std::all_of(back.begin(), back.end(), [&](float v) { return v == want; });
  } catch (const std::exception& e) {
    err = e.what();
  }
  // Every rank gets here: a failed or timed-out rank has aborted its communicator, so its peers'
  // collectives fail or time out too, each within o.timeout_s.
  if (dist_any(!err.empty())) {
    res.error = err.empty() ? "NCCL failed on another rank" : err;
    return res;
  }
  double avg = dist_max(static_cast<long long>(elapsed / iters * 1e9)) / 1e9;
  res.correct = !dist_any(!ok);
  res.ms = avg * 1e3;
  double bytes = static_cast<double>(res.count) * sizeof(float);
  res.algbw_gbs = avg > 0 ? bytes / avg / 1e9 : 0;
  res.busbw_gbs = d.world_size > 1 ? res.algbw_gbs * 2.0 * (d.world_size - 1) / d.world_size : 0;
  return res;
}
#endif

json to_json(const AllreduceResult& a) {
  return {{"backend", a.backend}, {"floats", a.count},   {"ms", a.ms},           {"algbw_gb_per_s", a.algbw_gbs},
          {"busbw_gb_per_s", a.busbw_gbs}, {"correct", a.correct}, {"error", a.error}};
}

// ---- printing -----------------------------------------------------------------------------------
std::string gib(double b) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(1) << b / double(1ull << 30) << " GiB";
  return os.str();
}

void print_report(const std::vector<json>& reps, const BindingPlan& plan, const std::vector<Problem>& ps,
                  const std::vector<AllreduceResult>& ars, const Options& o) {
  std::set<std::string> hosts;
  for (const auto& r : reps) hosts.insert(r["host"].get<std::string>());
  std::ostringstream out;
  out << "hpctrain doctor: " << reps.size() << " rank(s) on " << hosts.size() << " host(s), checking a "
      << (o.device == "cuda" ? "GPU" : "CPU") << " run\n\n";
  // The table: one row per rank.
  std::vector<std::vector<std::string>> rows = {
      {"rank", "host", "local_rank", "gpu", "name", "uuid", "memory", "cc", "gpu status"}};
  for (size_t i = 0; i < reps.size(); ++i) {
    const json& r = reps[i];
    std::vector<std::string> row = {std::to_string(r["rank"].get<int>()), r["host"], std::to_string(plan.local_rank[i])};
    int dev = plan.device[i];
    if (dev >= 0) {
      const json& g = r["gpu"]["devices"][static_cast<size_t>(dev)];
      row.push_back(std::to_string(dev));
      row.push_back(g["name"]);
      row.push_back(g["uuid"]);
      row.push_back(g["memory_bytes"].get<double>() > 0 ? gib(g["memory_bytes"].get<double>()) : "-");
      row.push_back(g["cc"]);
    } else {
      for (int k = 0; k < 5; ++k) row.push_back("-");
    }
    row.push_back(r["gpu"]["status"]);
    rows.push_back(row);
  }
  std::vector<size_t> w(rows[0].size(), 0);
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size(); ++c) w[c] = std::max(w[c], row[c].size());
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c)
      out << std::left << std::setw(static_cast<int>(w[c] + (c + 1 < row.size() ? 2 : 0))) << row[c];
    out << "\n";
  }
  const json& r0 = reps[0];
  auto libline = [&](const char* lib, const char* name) {
    long b = r0[lib]["built"], rt = r0[lib]["runtime"];
    if (b == 0 && rt == 0) return std::string(name) + ": not built with CUDA";
    return std::string(name) + ": " + lib_version_string(rt) + " (built with " + lib_version_string(b) + ")";
  };
  out << "\nVersions (rank 0; differences between ranks are listed as problems)\n";
  int drv = r0["gpu"]["driver_version"], rt = r0["gpu"]["runtime_version"];
  out << "  CUDA driver: " << (drv > 0 ? cuda_version_string(drv) : "not loaded") << ", runtime: "
      << (rt > 0 ? cuda_version_string(rt) : "not built with CUDA") << "\n";
  out << "  " << libline("cudnn", "cuDNN") << "\n  " << libline("nccl", "NCCL") << "\n";
  std::string mpi = r0["mpi_library"];
  out << "  MPI: " << mpi.substr(0, mpi.find('\n')) << " (MPI " << r0["mpi_standard"].get<std::string>() << ")\n";
  out << "  HDF5: " << r0["hdf5_runtime"].get<std::string>() << " (built with " << r0["hdf5_built"].get<std::string>()
      << ")\n";
  out << "  hpctrain binary: " << r0["exe_hash"].get<std::string>() << "\n";
  const json& rd = r0["run_dir"];
  out << "\nRun directory " << rd["path"].get<std::string>() << (rd["exists"].get<bool>() ? "" : " (not created yet)")
      << ": " << rd["fs"].get<std::string>() << (rd["network"].get<bool>() ? " (network)" : " (local)") << ", "
      << (rd["free_bytes"].get<double>() >= 0 ? gib(rd["free_bytes"].get<double>()) : std::string("?"))
      << " free, HDF5_USE_FILE_LOCKING="
      << (r0["hdf5_use_file_locking"].is_null() ? std::string("(unset)") : r0["hdf5_use_file_locking"].get<std::string>())
      << "\n\n";
  for (const auto& a : ars) {
    if (!a.error.empty()) {
      out << "Allreduce (" << a.backend << "): not run: " << a.error << "\n";
      continue;
    }
    out << "Allreduce (" << a.backend << ", " << std::fixed << std::setprecision(2)
        << a.count * sizeof(float) / double(1 << 20) << " MiB float32, " << reps.size() << " ranks): " << std::setprecision(3)
        << a.ms << " ms, algbw " << a.algbw_gbs << " GB/s, busbw " << a.busbw_gbs << " GB/s, result "
        << (a.correct ? "correct" : "WRONG") << "\n";
  }
  int errors = 0;
  for (const auto& p : ps) errors += p.severity == "error";
  out << "\n";
  if (ps.empty()) {
    out << "No problems found.\n";
  } else {
    out << "Problems (" << errors << " error(s), " << ps.size() - errors << " warning(s)):\n";
    int i = 0;
    for (const auto& p : ps) {
      out << "  " << ++i << ". [" << p.severity << "] " << p.area << ": " << p.what << "\n";
      out << "     fix: " << p.fix << "\n";
    }
  }
  std::cout << out.str() << std::flush;
}

}  // namespace

int cmd_doctor(const Args& args) {
  for (const auto& a : args)
    if (a == "--help" || a == "-h") {
      if (dist().rank == 0) print_help();
      return kExitOk;
    }
  const Options o = parse_options(args);
  const DistContext& d = dist();

  json mine = probe_rank(o, d);
  std::vector<json> reps = gather_reports(mine, d);

  // Rank 0 decides the binding and whether NCCL can run (every rank has its own GPU), and tells everyone.
  BindingPlan plan;
  std::vector<Problem> problems;
  int nccl_device = -1;
  std::vector<int> devices(static_cast<size_t>(d.world_size), -1);
  int run_nccl = 0;
  if (d.rank == 0) {
    problems = analyse(reps, o, &plan);
    bool shared = false;
    for (const auto& is : plan.issues) shared |= is.kind != BindingIssue::Kind::kNoGpu;
    bool real_gpus = std::getenv("HT_DOCTOR_FAKE_GPU_UUIDS") == nullptr && std::getenv("HT_LIBCUDA") == nullptr;
    run_nccl = real_gpus && !shared &&
               std::all_of(plan.device.begin(), plan.device.end(), [](int x) { return x >= 0; }) &&
               reps[0]["nccl"]["built"].get<long>() > 0;
    devices = plan.device;
  }
  HT_MPI_CHECK(MPI_Bcast(&run_nccl, 1, MPI_INT, 0, d.world));
  HT_MPI_CHECK(MPI_Bcast(devices.data(), d.world_size, MPI_INT, 0, d.world));
  nccl_device = devices[static_cast<size_t>(d.rank)];

  std::vector<AllreduceResult> ars;
  ars.push_back(mpi_allreduce_check(o, d));
#if defined(HT_HAVE_CUDA)
  if (run_nccl) ars.push_back(nccl_allreduce_check(o, d, nccl_device));
  else {
    AllreduceResult skipped;
    skipped.backend = "NCCL";
    skipped.error = "needs every rank on its own GPU";
    ars.push_back(skipped);
  }
#else
  (void)nccl_device;
  AllreduceResult skipped;
  skipped.backend = "NCCL";
  skipped.error = "not built with CUDA";
  ars.push_back(skipped);
#endif

  int code = kExitOk;
  if (d.rank == 0) {
    for (const auto& a : ars) {
      if (a.error.empty() && !a.correct)
        problems.push_back({"error", "allreduce", a.backend + " allreduce gave a wrong sum",
                            "run the MPI/NCCL tests (osu_allreduce, nccl-tests) and check the interconnect"});
      if (a.backend == "NCCL" && !a.error.empty() && run_nccl)
        problems.push_back({"error", "allreduce", "NCCL allreduce failed: " + a.error, "rerun with NCCL_DEBUG=INFO"});
    }
    print_report(reps, plan, problems, ars, o);
    for (const auto& p : problems)
      if (p.severity == "error") code = kExitRuntime;
    if (!o.json_path.empty()) {
      json j;
      j["ranks"] = reps;
      j["problems"] = json::array();
      for (const auto& p : problems)
        j["problems"].push_back({{"severity", p.severity}, {"area", p.area}, {"what", p.what}, {"fix", p.fix}});
      j["allreduce"] = json::array();
      for (const auto& a : ars) j["allreduce"].push_back(to_json(a));
      j["binding"] = {{"device", plan.device}, {"uuid", plan.uuid}, {"local_rank", plan.local_rank}};
      j["exit_code"] = code;
      std::ofstream f(o.json_path);
      f << j.dump(2) << "\n";
      if (!f) throw RuntimeError("doctor: cannot write " + o.json_path);
    }
  }
  HT_MPI_CHECK(MPI_Bcast(&code, 1, MPI_INT, 0, d.world));
  return code;
}

}  // namespace ht
