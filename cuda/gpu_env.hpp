#pragma once
// GPU environment probing through the CUDA driver API loaded at run time (dlopen of libcuda.so.1),
// so it works in CPU-only builds and on machines without a driver: is the driver there, what CUDA
// version does it support (cuDriverGetVersion), does cuInit succeed, which devices are visible
// (name, UUID, memory, compute capability), and, when something is wrong, why and what to do
// (the questions of PyTorch's "torch.cuda.is_available() is False" troubleshooting).
//
// No MPI and no CUDA headers here: the same code runs in hpctrain and in standalone device checks.
#include <cstdint>
#include <string>
#include <vector>

namespace ht {

/// One device as the driver API reports it (ordinal among the visible devices).
struct GpuDevice {
  int ordinal = 0;              ///< CUdevice ordinal, i.e. index among CUDA_VISIBLE_DEVICES
  std::string name;             ///< cuDeviceGetName, e.g. "NVIDIA H200"
  std::string uuid;             ///< cuDeviceGetUuid in nvidia-smi form "GPU-xxxxxxxx-xxxx-..."
  uint64_t total_memory_bytes = 0;  ///< cuDeviceTotalMem
  int cc_major = 0, cc_minor = 0;   ///< compute capability
  std::string pci_bus_id;       ///< "0000:65:00.0" (domain:bus:device.function)
};

/// Why GPUs are or are not usable. kOk means at least one device is visible.
enum class GpuStatus {
  kOk,
  kDriverMissing,       ///< libcuda.so.1 cannot be loaded (no NVIDIA driver on this node/container)
  kDriverTooOld,        ///< the driver supports an older CUDA major version than the runtime we built with
  kVisibleDevicesEmpty, ///< CUDA_VISIBLE_DEVICES set to an empty or "no device" value
  kNoDevice,            ///< driver present, cuInit reports no device
  kInitFailed,          ///< cuInit failed for another reason (named)
};

/// Facts gathered by probe_gpu_env (or written by a test).
struct GpuEnv {
  std::string libcuda;          ///< the library name or path that was opened
  bool driver_loaded = false;   ///< dlopen succeeded
  std::string load_error;       ///< dlerror() when not loaded
  int driver_version = 0;       ///< cuDriverGetVersion: 1000*major + 10*minor (12040 = 12.4); 0 unknown
  int runtime_version = 0;      ///< CUDART_VERSION the build was compiled with; 0 in CPU-only builds
  int init_result = -1;         ///< CUresult of cuInit(0); -1 when not called
  std::string init_error;       ///< cuGetErrorName/cuGetErrorString of a failed cuInit
  bool visible_devices_set = false;   ///< CUDA_VISIBLE_DEVICES present in the environment
  std::string visible_devices;        ///< its value
  std::vector<GpuDevice> devices;     ///< visible devices (empty unless cuInit succeeded)
};

/// A diagnosis: status, one line saying what is wrong (or what was found) and the likely fix.
struct GpuDiagnosis {
  GpuStatus status = GpuStatus::kOk;
  std::string summary;  ///< e.g. "no NVIDIA driver: libcuda.so.1 cannot be loaded (...)"
  std::string fix;      ///< empty when status is kOk
};

/// Probes the driver. `libcuda` overrides the library to open; by default the environment variable
/// HT_LIBCUDA (a test hook: tests point it at a fake driver library) or else "libcuda.so.1".
/// Never throws: every failure is recorded in the result.
GpuEnv probe_gpu_env(const std::string& libcuda = "");

/// Pure diagnosis of the facts (unit-testable with made-up facts). Order of checks: driver missing,
/// CUDA_VISIBLE_DEVICES hiding everything, driver too old (cuInit CUDA_ERROR_INSUFFICIENT_DRIVER or a
/// lower major version than the runtime), no device, other cuInit failures, ok.
GpuDiagnosis diagnose_gpu_env(const GpuEnv& env);

/// "12.4" from 12040 (the encoding of cuDriverGetVersion and CUDART_VERSION); "unknown" for 0.
std::string cuda_version_string(int version);

/// True when CUDA_VISIBLE_DEVICES' value hides every device: "", "-1", "none", "NoDevFiles"
/// (Slurm's value when a job has no GPUs), or a list whose first entry is invalid (CUDA stops at it).
bool visible_devices_hide_all(const std::string& value);

/// Formats 16 raw UUID bytes as nvidia-smi does: "GPU-" + 8-4-4-4-12 lowercase hex.
std::string format_gpu_uuid(const unsigned char bytes[16]);

const char* gpu_status_name(GpuStatus s);

}  // namespace ht
