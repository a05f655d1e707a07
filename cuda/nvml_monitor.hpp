#pragma once
// GPU monitoring through NVML (dlopen of libnvidia-ml.so.1: the numbers `nvidia-smi` shows, without
// shelling out). A background thread samples utilisation, memory used, temperature and power of one
// GPU every period; snapshot() returns the latest sample for the trainer's `step` metrics. Without
// NVML (CPU machines, containers without it) the monitor is inactive and snapshots are empty.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace ht {

/// One NVML sample. valid == false: no NVML or no sample yet (then the other fields are zero).
struct NvmlSnapshot {
  bool valid = false;
  double gpu_util_pct = 0;        ///< nvmlDeviceGetUtilizationRates .gpu (% of time a kernel ran)
  double mem_util_pct = 0;        ///< .memory (% of time device memory was read or written)
  uint64_t memory_used_bytes = 0; ///< nvmlDeviceGetMemoryInfo .used
  uint64_t memory_total_bytes = 0;
  double temperature_c = 0;       ///< nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)
  double power_w = 0;             ///< nvmlDeviceGetPowerUsage (mW) / 1000
  int64_t samples = 0;            ///< samples taken so far

  /// Metric fields with units in their names (docs/metrics.md): gpu_util_pct, gpu_mem_util_pct,
  /// gpu_memory_used_bytes, gpu_memory_total_bytes, gpu_temperature_c, gpu_power_w. Empty when !valid.
  std::vector<std::pair<std::string, double>> fields() const;
};

class NvmlMonitor {
 public:
  /// Opens NVML (library: HT_LIBNVML, a test hook, or "libnvidia-ml.so.1") and starts sampling the GPU
  /// with this UUID (as cuDeviceGetUuid/nvidia-smi print it, "GPU-...") every period_ms. Any failure
  /// (no library, unknown UUID) leaves the monitor inactive; reason() says why. Never throws.
  NvmlMonitor(const std::string& gpu_uuid, int period_ms = 500);
  ~NvmlMonitor();
  NvmlMonitor(const NvmlMonitor&) = delete;
  NvmlMonitor& operator=(const NvmlMonitor&) = delete;

  bool active() const { return active_; }
  const std::string& reason() const { return reason_; }
  /// The latest sample (cheap: a copy under a mutex).
  NvmlSnapshot snapshot() const;
  /// Samples now, synchronously (also used by the thread).
  void sample_now();

 private:
  void run();
  struct Api;
  Api* api_ = nullptr;
  void* device_ = nullptr;
  bool active_ = false;
  std::string reason_;
  int period_ms_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  NvmlSnapshot last_;
  std::thread thread_;
};

}  // namespace ht
