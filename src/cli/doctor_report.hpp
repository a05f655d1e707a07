#pragma once
// hpctrain doctor: the typed report. Each rank's probe (doctor_probe.hpp) fills a RankReport; rank 0
// gathers them as JSON (to_json/from_json below, the same encoding the --json file holds under
// "ranks"), the analysis (doctor_analysis.hpp) turns them into Problems, and the printer
// (doctor_print.hpp) writes the table. The JSON keys are the contract of `hpctrain doctor --json`
// (tests/doctor/test_doctor.py reads them); change them only together with that contract.
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cuda/binding_plan.hpp"
#include "cuda/gpu_env.hpp"
#include "src/cli/doctor_net.hpp"

namespace ht {

/// Which run the doctor checks: a GPU run (no usable GPU is an error) or a CPU run (GPUs informational).
enum class DoctorDevice { cuda, cpu };

/// The command-line options of `hpctrain doctor` (see cmd_doctor.cpp for their meaning).
struct DoctorOptions {
  std::string run_dir = "runs";
  DoctorDevice device = DoctorDevice::cuda;
  bool allow_shared_gpu = false;
  double allreduce_mb = 4;   ///< size of the test allreduce in MiB
  double min_free_gb = 2;    ///< less free space (GiB) in the run directory is an error
  double timeout_s = 60;     ///< time limit of NCCL initialisation and of each allreduce, seconds
  std::string json_path;     ///< empty: no JSON file
  bool qualify = false;          ///< also rate every node's compute and network (src/cli/doctor_qualify.hpp)
  double qualify_fraction = 0.8; ///< a node below this fraction of the median node is named
  double qualify_seconds = 2;    ///< time of the compute check per rank
};

/// A cuDNN or NCCL version pair in the libraries' integer encoding (major*10000+minor*100+patch, or
/// major*1000+minor*100+patch for cuDNN 8 and old NCCL). built 0: not built with it; runtime -1:
/// the library is missing at run time, 0: none (CPU-only build).
struct LibVersion {
  long built = 0;
  long runtime = 0;
};

/// "9.1.0" from 90100 (or 8907 -> "8.9.7"); "missing" for -1, "none" for 0.
std::string lib_version_string(long v);
/// The major version of the integer encoding (90100 -> 9, 8907 -> 8).
long lib_major(long v);

/// The GPU side of one rank: the driver diagnosis (cuda/gpu_env.hpp) and the visible devices.
struct GpuProbe {
  GpuStatus status = GpuStatus::kDriverMissing;
  std::string summary;  ///< one line: what was found or what is wrong
  std::string fix;      ///< the likely fix; empty when status is kOk
  int driver_version = 0;   ///< cuDriverGetVersion encoding (12040 = 12.4); 0 unknown
  int runtime_version = 0;  ///< CUDART_VERSION built with; 0 in CPU-only builds
  std::optional<std::string> cuda_visible_devices;  ///< nullopt when unset
  std::vector<GpuDevice> devices;                   ///< visible devices, in CUDA ordinal order
  bool ok() const { return status == GpuStatus::kOk; }
};

/// The run directory as one rank sees it (the nearest existing ancestor when it does not exist yet).
struct RunDirProbe {
  std::string path;          ///< as given by --run-dir
  std::string checked_path;  ///< absolute path of the nearest existing ancestor
  bool exists = false;       ///< whether `path` itself exists
  std::string fs;            ///< file system name ("ext4", "lustre", ...), "0x..." unknown magic, "unknown"
  bool network = false;      ///< a network/parallel file system (HDF5 file locking may fail or hang)
  double free_bytes = -1;    ///< bytes available to this user; -1 unknown
  bool writable = false;     ///< checked_path is writable by this user
};

/// Everything one rank's probe found.
struct RankReport {
  int rank = 0;
  std::string host;
  long pid = 0;
  GpuProbe gpu;
  LibVersion cudnn, nccl;
  std::string mpi_library;   ///< MPI_Get_library_version (may span lines)
  std::string mpi_standard;  ///< "3.1"
  std::string exe_hash;      ///< FNV-1a 64 of the executable, 16 hex digits ("unreadable" on failure)
  std::string hdf5_built;    ///< "1.10.10" from the headers
  std::string hdf5_runtime;  ///< H5get_libversion
  std::optional<std::string> hdf5_use_file_locking;  ///< HDF5_USE_FILE_LOCKING; nullopt when unset
  RunDirProbe run_dir;
  NetProbe net;  ///< this rank's network interfaces and interface-selection variables
};

/// How bad a problem is: an error makes the exit code 1, a warning does not.
enum class Severity { error, warning };
/// "error" or "warning" (as printed and in the JSON).
const char* severity_name(Severity s);

/// One problem found, with its likely fix.
struct Problem {
  Severity severity = Severity::error;
  std::string area;  ///< gpu, binding, cudnn, nccl, mpi, binary, hdf5, disk, network, allreduce
  std::string what;  ///< one line naming the ranks/hosts concerned
  std::string fix;
};

/// One test allreduce (collective, every rank took part). error non-empty: not run or failed.
struct AllreduceResult {
  std::string backend;   ///< "MPI" or "NCCL"
  size_t count = 0;      ///< float32 elements
  double ms = 0;         ///< average per allreduce, the slowest rank's
  double algbw_gbs = 0;  ///< bytes / time, GB/s
  double busbw_gbs = 0;  ///< algbw * 2(n-1)/n, as nccl-tests reports
  bool correct = false;
  std::string error;
  /// NCCL only: what NCCL's RAS service reported while the communicator lived (its problem lines,
  /// "no problem reported"), or why it could not be asked (mpi/nccl_ras.hpp); empty when not asked.
  std::string ras;
  bool ras_reached = false;
};

/// The whole result on rank 0: what `--json FILE` writes.
struct DoctorReport {
  std::vector<RankReport> ranks;
  std::vector<Problem> problems;
  std::vector<AllreduceResult> allreduce;
  BindingPlan binding;
  int exit_code = 0;
};

/// 0 when no problem has severity error, else 1 (kExitRuntime).
int exit_code_for(const std::vector<Problem>& problems);

// JSON encodings (nlohmann ADL hooks). from_json throws nlohmann::json::exception on a missing key.
void to_json(nlohmann::json& j, const GpuDevice& d);
void from_json(const nlohmann::json& j, GpuDevice& d);
void to_json(nlohmann::json& j, const RankReport& r);
void from_json(const nlohmann::json& j, RankReport& r);
void to_json(nlohmann::json& j, const Problem& p);
void to_json(nlohmann::json& j, const AllreduceResult& a);
/// The --json file: {"ranks", "problems", "allreduce", "binding": {device, uuid, local_rank}, "exit_code"}.
void to_json(nlohmann::json& j, const DoctorReport& r);

}  // namespace ht
