// NVML through dlopen (nvml.h signatures re-declared: CPU-only builds have no NVML header).
#include "cuda/nvml_monitor.hpp"

#include <dlfcn.h>

#include <chrono>
#include <cstdlib>
#include <type_traits>

namespace ht {

namespace {
using nvmlReturn_t = int;
using nvmlDevice_t = void*;
struct nvmlUtilization_t { unsigned int gpu, memory; };
struct nvmlMemory_t { unsigned long long total, free, used; };
constexpr int kNvmlTemperatureGpu = 0;
}  // namespace

struct NvmlMonitor::Api {
  void* lib = nullptr;
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  nvmlReturn_t (*by_uuid)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*util)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*mem)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*temp)(nvmlDevice_t, int, unsigned int*) = nullptr;
  nvmlReturn_t (*power)(nvmlDevice_t, unsigned int*) = nullptr;
  bool inited = false;
};

std::vector<std::pair<std::string, double>> NvmlSnapshot::fields() const {
  if (!valid) return {};
  return {{"gpu_util_pct", gpu_util_pct},
          {"gpu_mem_util_pct", mem_util_pct},
          {"gpu_memory_used_bytes", static_cast<double>(memory_used_bytes)},
          {"gpu_memory_total_bytes", static_cast<double>(memory_total_bytes)},
          {"gpu_temperature_c", temperature_c},
          {"gpu_power_w", power_w}};
}

NvmlMonitor::NvmlMonitor(const std::string& gpu_uuid, int period_ms) : period_ms_(period_ms > 0 ? period_ms : 500) {
  const char* hook = std::getenv("HT_LIBNVML");
  std::string libname = hook && *hook ? hook : "libnvidia-ml.so.1";
  void* lib = dlopen(libname.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    reason_ = "NVML not available: " + libname + " cannot be loaded (" + (e ? e : "?") + ")";
    return;
  }
  api_ = new Api;
  api_->lib = lib;
  auto get = [&](auto& fn, const char* name, const char* alt = nullptr) {
    void* p = dlsym(lib, name);
    if (!p && alt) p = dlsym(lib, alt);
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
    return p != nullptr;
  };
  bool ok = get(api_->init, "nvmlInit_v2", "nvmlInit") & get(api_->shutdown, "nvmlShutdown") &
            get(api_->by_uuid, "nvmlDeviceGetHandleByUUID") & get(api_->util, "nvmlDeviceGetUtilizationRates") &
            get(api_->mem, "nvmlDeviceGetMemoryInfo") & get(api_->temp, "nvmlDeviceGetTemperature") &
            get(api_->power, "nvmlDeviceGetPowerUsage");
  if (!ok) {
    reason_ = "NVML: " + libname + " lacks a needed function";
    return;
  }
  int rc = api_->init();
  if (rc != 0) {
    reason_ = "NVML: nvmlInit failed with code " + std::to_string(rc);
    return;
  }
  api_->inited = true;
  nvmlDevice_t dev = nullptr;
  rc = api_->by_uuid(gpu_uuid.c_str(), &dev);
  if (rc != 0) {
    reason_ = "NVML: no device with UUID '" + gpu_uuid + "' (code " + std::to_string(rc) + ")";
    return;
  }
  device_ = dev;
  active_ = true;
  sample_now();
  thread_ = std::thread([this] { run(); });
}

NvmlMonitor::~NvmlMonitor() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (api_) {
    if (api_->inited) api_->shutdown();
    // The library handle is not closed: NVML may keep threads of its own alive briefly.
    delete api_;
  }
}

void NvmlMonitor::sample_now() {
  if (!active_) return;
  NvmlSnapshot s;
  s.valid = true;
  nvmlUtilization_t u{};
  if (api_->util(device_, &u) == 0) {
    s.gpu_util_pct = u.gpu;
    s.mem_util_pct = u.memory;
  }
  nvmlMemory_t m{};
  if (api_->mem(device_, &m) == 0) {
    s.memory_used_bytes = m.used;
    s.memory_total_bytes = m.total;
  }
  unsigned int t = 0;
  if (api_->temp(device_, kNvmlTemperatureGpu, &t) == 0) s.temperature_c = t;
  unsigned int mw = 0;
  if (api_->power(device_, &mw) == 0) s.power_w = mw / 1000.0;
  std::lock_guard<std::mutex> lk(mu_);
  s.samples = last_.samples + 1;
  last_ = s;
}

NvmlSnapshot NvmlMonitor::snapshot() const {
  std::lock_guard<std::mutex> lk(mu_);
  return last_;
}

void NvmlMonitor::run() {
  std::unique_lock<std::mutex> lk(mu_);
  while (!stop_) {
    cv_.wait_for(lk, std::chrono::milliseconds(period_ms_), [this] { return stop_; });
    if (stop_) break;
    lk.unlock();
    sample_now();
    lk.lock();
  }
}

}  // namespace ht
