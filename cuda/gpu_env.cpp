// GPU environment probing through dlopen("libcuda.so.1") and the CUDA driver API (cuda.h signatures
// re-declared here so that CPU-only builds need no CUDA headers).
#include "cuda/gpu_env.hpp"

#include <dlfcn.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#if defined(HT_HAVE_CUDA)
#include <cuda_runtime_api.h>  // CUDART_VERSION
#endif

namespace ht {
namespace {

// Driver API subset (cuda.h): CUresult is an int enum, CUdevice an int.
using CUresult = int;
using CUdevice = int;
constexpr CUresult kCudaSuccess = 0;
constexpr CUresult kCudaErrorInsufficientDriver = 35;   // CUDA_ERROR_INSUFFICIENT_DRIVER
constexpr CUresult kCudaErrorNoDevice = 100;            // CUDA_ERROR_NO_DEVICE
constexpr CUresult kCudaErrorSystemDriverMismatch = 803;  // CUDA_ERROR_SYSTEM_DRIVER_MISMATCH
constexpr int kAttrPciBusId = 33, kAttrPciDeviceId = 34, kAttrPciDomainId = 50;
constexpr int kAttrCcMajor = 75, kAttrCcMinor = 76;
struct CUuuid { unsigned char bytes[16]; };

using FnInit = CUresult (*)(unsigned);
using FnDriverGetVersion = CUresult (*)(int*);
using FnDeviceGetCount = CUresult (*)(int*);
using FnDeviceGet = CUresult (*)(CUdevice*, int);
using FnDeviceGetName = CUresult (*)(char*, int, CUdevice);
using FnDeviceGetUuid = CUresult (*)(CUuuid*, CUdevice);
using FnDeviceTotalMem = CUresult (*)(size_t*, CUdevice);
using FnDeviceGetAttribute = CUresult (*)(int*, int, CUdevice);
using FnGetErrorString = CUresult (*)(CUresult, const char**);

template <class F>
F sym(void* lib, const char* name) {
  return reinterpret_cast<F>(dlsym(lib, name));
}

std::string error_text(void* lib, CUresult rc) {
  auto name_fn = sym<FnGetErrorString>(lib, "cuGetErrorName");
  auto str_fn = sym<FnGetErrorString>(lib, "cuGetErrorString");
  const char* name = nullptr;
  const char* str = nullptr;
  if (name_fn) name_fn(rc, &name);
  if (str_fn) str_fn(rc, &str);
  std::ostringstream os;
  os << (name ? name : "CUresult") << " (" << rc << ")";
  if (str) os << ": " << str;
  return os.str();
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

}  // namespace

const char* gpu_status_name(GpuStatus s) {
  switch (s) {
    case GpuStatus::kOk: return "ok";
    case GpuStatus::kDriverMissing: return "driver missing";
    case GpuStatus::kDriverTooOld: return "driver older than the runtime";
    case GpuStatus::kVisibleDevicesEmpty: return "CUDA_VISIBLE_DEVICES hides every GPU";
    case GpuStatus::kNoDevice: return "no device";
    case GpuStatus::kInitFailed: return "cuInit failed";
  }
  return "?";
}

std::string cuda_version_string(int v) {
  if (v <= 0) return "unknown";
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

std::string format_gpu_uuid(const unsigned char b[16]) {
  char buf[64];
  std::snprintf(buf, sizeof(buf),
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
                b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return buf;
}

bool visible_devices_hide_all(const std::string& value) {
  // CUDA reads the comma-separated list up to its first invalid entry; an invalid first entry hides all.
  std::string first = trim(value.substr(0, value.find(',')));
  if (first.empty()) return true;
  if (first.rfind("GPU-", 0) == 0 || first.rfind("MIG-", 0) == 0) return false;
  for (char c : first)
    if (!std::isdigit(static_cast<unsigned char>(c))) return true;  // "-1", "none", "NoDevFiles"
  return false;
}

GpuEnv probe_gpu_env(const std::string& libcuda_arg) {
  GpuEnv env;
#if defined(HT_HAVE_CUDA)
  env.runtime_version = CUDART_VERSION;
#endif
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES")) {
    env.visible_devices_set = true;
    env.visible_devices = v;
  }
  env.libcuda = libcuda_arg;
  if (env.libcuda.empty()) {
    const char* hook = std::getenv("HT_LIBCUDA");
    env.libcuda = hook && *hook ? hook : "libcuda.so.1";
  }
  // RTLD_LOCAL: the symbols stay private to us; the CUDA runtime (if any) opens its own handle.
  void* lib = dlopen(env.libcuda.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* err = dlerror();
    env.load_error = err ? err : "dlopen failed";
    return env;
  }
  env.driver_loaded = true;
  if (auto f = sym<FnDriverGetVersion>(lib, "cuDriverGetVersion")) f(&env.driver_version);
  auto init = sym<FnInit>(lib, "cuInit");
  if (!init) {
    env.init_error = "libcuda has no cuInit";
    return env;  // the handle stays open: the driver is process-wide anyway
  }
  env.init_result = init(0);
  if (env.init_result != kCudaSuccess) {
    env.init_error = error_text(lib, env.init_result);
    return env;
  }
  auto get_count = sym<FnDeviceGetCount>(lib, "cuDeviceGetCount");
  auto get_dev = sym<FnDeviceGet>(lib, "cuDeviceGet");
  auto get_name = sym<FnDeviceGetName>(lib, "cuDeviceGetName");
  auto get_uuid = sym<FnDeviceGetUuid>(lib, "cuDeviceGetUuid");
  auto get_mem = sym<FnDeviceTotalMem>(lib, "cuDeviceTotalMem_v2");
  if (!get_mem) get_mem = sym<FnDeviceTotalMem>(lib, "cuDeviceTotalMem");
  auto get_attr = sym<FnDeviceGetAttribute>(lib, "cuDeviceGetAttribute");
  int count = 0;
  if (!get_count || get_count(&count) != kCudaSuccess) count = 0;
  for (int i = 0; i < count; ++i) {
    GpuDevice d;
    d.ordinal = i;
    CUdevice dev = i;
    if (get_dev && get_dev(&dev, i) != kCudaSuccess) continue;
    char name[256] = {0};
    if (get_name && get_name(name, sizeof(name) - 1, dev) == kCudaSuccess) d.name = name;
    CUuuid u{};
    if (get_uuid && get_uuid(&u, dev) == kCudaSuccess) d.uuid = format_gpu_uuid(u.bytes);
    size_t mem = 0;
    if (get_mem && get_mem(&mem, dev) == kCudaSuccess) d.total_memory_bytes = mem;
    if (get_attr) {
      get_attr(&d.cc_major, kAttrCcMajor, dev);
      get_attr(&d.cc_minor, kAttrCcMinor, dev);
      int dom = 0, bus = 0, devid = 0;
      if (get_attr(&dom, kAttrPciDomainId, dev) == kCudaSuccess && get_attr(&bus, kAttrPciBusId, dev) == kCudaSuccess &&
          get_attr(&devid, kAttrPciDeviceId, dev) == kCudaSuccess) {
        char buf[32];
        std::snprintf(buf, sizeof(buf), "%04x:%02x:%02x.0", dom, bus, devid);
        d.pci_bus_id = buf;
      }
    }
    env.devices.push_back(std::move(d));
  }
  return env;
}

GpuDiagnosis diagnose_gpu_env(const GpuEnv& env) {
  GpuDiagnosis d;
  auto set = [&](GpuStatus s, std::string summary, std::string fix) {
    d.status = s;
    d.summary = std::move(summary);
    d.fix = std::move(fix);
    return d;
  };
  if (!env.driver_loaded)
    return set(GpuStatus::kDriverMissing,
               "no NVIDIA driver: " + env.libcuda + " cannot be loaded (" + env.load_error + ")",
               "run on a GPU node (login nodes usually have no driver: srun --gpus-per-task=1 ... or "
               "sbatch --gres=gpu:N); in a container pass the GPUs through (docker --gpus all, apptainer "
               "--nv); check that `nvidia-smi` works there");
  if (env.visible_devices_set && visible_devices_hide_all(env.visible_devices))
    return set(GpuStatus::kVisibleDevicesEmpty,
               "CUDA_VISIBLE_DEVICES='" + env.visible_devices + "' hides every GPU",
               "unset CUDA_VISIBLE_DEVICES, or ask the scheduler for GPUs (Slurm sets it to the allocated "
               "ones: --gpus-per-task=1 or --gres=gpu:N)");
  const int drv_major = env.driver_version / 1000, rt_major = env.runtime_version / 1000;
  if (env.init_result == kCudaErrorInsufficientDriver ||
      (env.driver_version > 0 && env.runtime_version > 0 && drv_major < rt_major))
    return set(GpuStatus::kDriverTooOld,
               "the NVIDIA driver supports CUDA " + cuda_version_string(env.driver_version) +
                   " but hpctrain was built with the CUDA " + cuda_version_string(env.runtime_version) +
                   " runtime" + (env.init_error.empty() ? "" : " (cuInit: " + env.init_error + ")"),
               "install a driver for CUDA " + cuda_version_string(env.runtime_version) +
                   " or newer, or load the cuda-compat forward-compatibility package (datacenter GPUs), "
                   "or rebuild hpctrain with a CUDA toolkit no newer than " +
                   cuda_version_string(env.driver_version));
  if (env.init_result == kCudaErrorNoDevice || (env.init_result == kCudaSuccess && env.devices.empty()))
    return set(GpuStatus::kNoDevice,
               "the NVIDIA driver is installed (CUDA " + cuda_version_string(env.driver_version) +
                   ") but reports no GPU" + (env.init_error.empty() ? "" : " (cuInit: " + env.init_error + ")"),
               "check `nvidia-smi`; a container needs the devices passed through (docker --gpus all, "
               "apptainer --nv); a job needs GPUs requested (--gpus-per-task / --gres=gpu:N); "
               "/dev/nvidia* must be readable by this user");
  if (env.init_result != kCudaSuccess) {
    std::string fix = "check `nvidia-smi` and `dmesg` for Xid errors";
    if (env.init_result == kCudaErrorSystemDriverMismatch)
      fix = "the kernel module and the user-space driver library differ in version (a driver update "
            "without reboot): reboot the node or reload the nvidia kernel module";
    return set(GpuStatus::kInitFailed, "cuInit failed: " + env.init_error, fix);
  }
  std::ostringstream os;
  os << env.devices.size() << " GPU(s) visible, driver CUDA " << cuda_version_string(env.driver_version);
  if (env.runtime_version > 0) os << ", runtime " << cuda_version_string(env.runtime_version);
  return set(GpuStatus::kOk, os.str(), "");
}

}  // namespace ht
