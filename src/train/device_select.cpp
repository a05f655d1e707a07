#include "src/train/device_select.hpp"

#include <string>

#include "mpi/gpu/gpu_binding.hpp"
#include "cuda/cuda_context.hpp"
#include "cuda/gpu_env.hpp"
#include "mpi/dist.hpp"
#include "base/error.hpp"
#include "base/log.hpp"

#if defined(HT_HAVE_CUDA)
#include <cuda_runtime.h>
#endif

namespace ht {

namespace {
constexpr bool built_with_cuda_backend() {
#if defined(HT_HAVE_CUDA)
  return true;
#else
  return false;
#endif
}

/// Number of visible GPUs, and why there are none when 0.
int visible_gpus(std::string* why) {
#if defined(HT_HAVE_CUDA)
  int n = 0;
  cudaError_t rc = cudaGetDeviceCount(&n);
  if (rc != cudaSuccess) {
    // The driver's own diagnosis ("no NVIDIA driver: libcuda.so.1 cannot be loaded", as doctor says)
    // rather than the runtime's cudaErrorInsufficientDriver, which reads as "update your driver".
    if (why) *why = diagnose_gpu_env(probe_gpu_env()).summary;
    cudaGetLastError();
    return 0;
  }
  if (n == 0 && why) *why = "no CUDA device is visible";
  return n;
#else
  if (why) *why = "this hpctrain was built without CUDA (nvcc was not found at build time)";
  return 0;
#endif
}
}  // namespace

Device select_device(DeviceChoice requested, int local_rank, bool allow_shared_gpu) {
  std::string why;
  Device d = Device::cpu;
  if (requested == DeviceChoice::cpu) {
    d = Device::cpu;
  } else {
    const int n = visible_gpus(&why);
    // ---- device binding (doctor/binding): "auto" picks cuda only when every rank sees a GPU, so all
    // ranks choose alike (collective) ----
    const bool all_have_gpus = !dist_any(n == 0);
    if (all_have_gpus || (requested == DeviceChoice::cuda && built_with_cuda_backend())) {
      d = Device::cuda;
    } else if (requested == DeviceChoice::cuda) {
      throw UsageError("train.device = cuda: " + why + ". Run 'hpctrain doctor' for a full diagnosis, or use --train.device cpu");
    } else if (n > 0) {
      why = "another rank sees no GPU";
    }
  }
#if defined(HT_HAVE_CUDA)
  // Rank binds GPU local_rank among the visible ones; bind_rank_gpu exchanges GPU UUIDs per node (its
  // shared-memory communicator, dist().local) so two ranks on one GPU is an error naming both (unless
  // dist.allow_shared_gpu), and no usable GPU on some rank is a usage error saying why (no device,
  // driver missing or too old, CUDA_VISIBLE_DEVICES empty).
  if (d == Device::cuda) cuda::init(bind_job_rank_gpu(allow_shared_gpu));
  (void)local_rank;
#else
  (void)local_rank;
  (void)allow_shared_gpu;
#endif
  if (dist().rank == 0)
    log_info(std::string("hpctrain: train.device = ") + to_string(requested) + " -> " + device_name(d) +
             (d == Device::cpu && requested == DeviceChoice::automatic ? " (" + why + ")" : std::string()));
  return d;
}

}  // namespace ht
