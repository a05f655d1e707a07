#include "src/cli/doctor_probe.hpp"

#include <sys/statfs.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <vector>

#include <hdf5.h>

#include "cuda/check.hpp"  // cuDNN and NCCL headers in CUDA builds
#include "mpi/check.hpp"
#include "base/hash.hpp"
#include "base/error.hpp"

namespace ht {
namespace {

/// Splits on `sep`, keeping empty entries (a trailing separator gives a trailing empty entry).
std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t pos = 0;
  if (s.empty()) return out;
  for (;;) {
    size_t end = s.find(sep, pos);
    out.push_back(s.substr(pos, end == std::string::npos ? std::string::npos : end - pos));
    if (end == std::string::npos) return out;
    pos = end + 1;
  }
}

LibVersion cudnn_version() {
  LibVersion v;
#if defined(HT_HAVE_CUDA)
  v.built = CUDNN_VERSION;
  v.runtime = static_cast<long>(cudnnGetVersion());
#endif
  return v;
}

LibVersion nccl_version() {
  LibVersion v;
#if defined(HT_HAVE_CUDA)
  v.built = NCCL_VERSION_CODE;
  int rt = 0;
  v.runtime = ncclGetVersion(&rt) == ncclSuccess ? rt : -1;
#endif
  return v;
}

/// FNV-1a 64 of the running executable: ranks running different builds get different hashes.
std::string exe_hash() {
  std::ifstream f("/proc/self/exe", std::ios::binary);
  if (!f) return "unreadable";
  Fnv1a h;
  std::vector<char> buf(1 << 20);
  while (f) {
    f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    h.update(buf.data(), static_cast<size_t>(f.gcount()));
  }
  return hex64(h.value());
}

struct KnownFs {
  unsigned long magic;
  const char* name;
  bool network;
};
// Network and parallel file systems are those where HDF5's default file locking (flock/fcntl) fails or hangs.
constexpr KnownFs kKnownFs[] = {
    {0x6969, "nfs", true},          {0x0BD00BD0, "lustre", true},     {0x47504653, "gpfs", true},
    {0xFF534D42, "cifs", true},     {0xFE534D42, "smb2", true},       {0x517B, "smb", true},
    {0x19830326, "beegfs", true},   {0x00C36400, "ceph", true},       {0xAAD7AAEA, "panfs", true},
    {0x20030528, "orangefs", true}, {0x5346414F, "afs", true},        {0x65735546, "fuse", true},
    {0xEF53, "ext4", false},        {0x58465342, "xfs", false},       {0x9123683E, "btrfs", false},
    {0x01021994, "tmpfs", false},   {0x794C7630, "overlayfs", false}, {0x2FC12FC1, "zfs", false}};

RunDirProbe probe_run_dir(const std::string& run_dir) {
  // The nearest existing ancestor tells the file system and free space.
  namespace fs = std::filesystem;
  fs::path p = fs::absolute(run_dir);
  std::error_code ec;
  while (!fs::exists(p, ec) && p.has_parent_path() && p != p.parent_path()) p = p.parent_path();
  RunDirProbe rd;
  rd.path = run_dir;
  rd.checked_path = p.string();
  rd.exists = fs::exists(fs::path(run_dir), ec);
  struct statfs sf {};
  if (statfs(p.c_str(), &sf) == 0) {
    rd.fs = fs_name(static_cast<long>(sf.f_type), &rd.network);
    rd.free_bytes = static_cast<double>(sf.f_bavail) * static_cast<double>(sf.f_bsize);
  } else {
    rd.fs = "unknown";
    rd.network = false;
    rd.free_bytes = -1.0;
  }
  rd.writable = access(p.c_str(), W_OK) == 0;
  return rd;
}

/// RUNTIME[/BUILT] of a doctor.*_version fault onto `v`.
void apply_lib_fault(LibVersion& v, const char* name, const std::string& value) {
  auto parts = split(value, '/');
  auto parse = [&](const std::string& s) -> long {
    if (s == "missing") return -1;
    try {
      return std::stol(s);
    } catch (const std::exception&) {
      throw UsageError(std::string("HT_TEST_FAULTS: ") + name + ": '" + s + "' is not an integer or 'missing'");
    }
  };
  if (!parts.empty()) v.runtime = parse(parts[0]);
  if (parts.size() > 1) v.built = parse(parts[1]);
}

}  // namespace

std::string fs_name(long type, bool* network) {
  for (const auto& k : kKnownFs)
    if (static_cast<unsigned long>(type) == k.magic) {
      *network = k.network;
      return k.name;
    }
  *network = false;
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%lx", static_cast<unsigned long>(type));
  return buf;
}

bool is_network_fs(const std::string& name) {
  for (const auto& k : kKnownFs)
    if (name == k.name) return k.network;
  return false;
}

GpuProbe gpu_probe_from(const GpuEnv& env) {
  GpuDiagnosis diag = diagnose_gpu_env(env);
  GpuProbe g;
  g.status = diag.status;
  g.summary = diag.summary;
  g.fix = diag.fix;
  g.driver_version = env.driver_version;
  g.runtime_version = env.runtime_version;
  if (env.visible_devices_set) g.cuda_visible_devices = env.visible_devices;
  g.devices = env.devices;
  return g;
}

void apply_test_faults(RankReport& r, const TestFaults& faults) {
  auto fault = [&](const char* name) { return faults.text_for_rank(name, r.rank); };
  if (auto f = fault("doctor.hosts")) r.host = *f;
  if (auto f = fault("doctor.gpu_uuids")) {
    // A loaded driver that sees exactly these devices.
    GpuEnv env;
    env.driver_loaded = true;
    env.init_result = 0;
    env.runtime_version = r.gpu.runtime_version;
    env.driver_version = r.gpu.driver_version;
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
    r.gpu = gpu_probe_from(env);
  }
  if (auto f = fault("doctor.cudnn_version")) apply_lib_fault(r.cudnn, "doctor.cudnn_version", *f);
  if (auto f = fault("doctor.nccl_version")) apply_lib_fault(r.nccl, "doctor.nccl_version", *f);
  if (auto f = fault("doctor.mpi_version")) r.mpi_library = *f;
  if (auto f = fault("doctor.exe_hash")) r.exe_hash = *f;
  if (auto f = fault("doctor.hdf5_version")) r.hdf5_runtime = *f;
  if (auto f = fault("doctor.fstype")) {
    r.run_dir.fs = *f;
    r.run_dir.network = is_network_fs(*f);
  }
  if (auto f = fault("doctor.free_bytes")) {
    try {
      size_t used = 0;
      r.run_dir.free_bytes = std::stod(*f, &used);
      if (used != f->size()) throw std::invalid_argument(*f);
    } catch (const std::exception&) {
      throw UsageError("HT_TEST_FAULTS: doctor.free_bytes: '" + *f + "' is not a number");
    }
  }
}

RankReport probe_rank(const DoctorOptions& o, int rank, const std::string& host) {
  RankReport r;
  r.rank = rank;
  r.host = host;
  r.pid = static_cast<long>(getpid());
  r.gpu = gpu_probe_from(probe_gpu_env());  // the driver API (HT_LIBCUDA may name a fake driver)
  r.cudnn = cudnn_version();
  r.nccl = nccl_version();

  char mpi_lib[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0;
  HT_MPI_CHECK(MPI_Get_library_version(mpi_lib, &len));
  r.mpi_library.assign(mpi_lib, static_cast<size_t>(len));
  while (!r.mpi_library.empty() && (r.mpi_library.back() == '\n' || r.mpi_library.back() == '\0'))
    r.mpi_library.pop_back();
  int mv = 0, msub = 0;
  MPI_Get_version(&mv, &msub);
  r.mpi_standard = std::to_string(mv) + "." + std::to_string(msub);
  r.exe_hash = exe_hash();

  unsigned maj = 0, min = 0, rel = 0;
  H5get_libversion(&maj, &min, &rel);
  r.hdf5_built = std::to_string(H5_VERS_MAJOR) + "." + std::to_string(H5_VERS_MINOR) + "." +
                 std::to_string(H5_VERS_RELEASE);
  r.hdf5_runtime = std::to_string(maj) + "." + std::to_string(min) + "." + std::to_string(rel);
  if (const char* lock = std::getenv("HDF5_USE_FILE_LOCKING")) r.hdf5_use_file_locking = lock;

  r.run_dir = probe_run_dir(o.run_dir);
  r.net = probe_network();
  apply_test_faults(r, TestFaults::get());
  return r;
}

}  // namespace ht
