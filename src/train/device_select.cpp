#include "src/train/device_select.hpp"

#include <iostream>

#include "cuda/cuda_context.hpp"
#include "mpi/dist.hpp"
#include "src/core/error.hpp"

#if defined(HT_HAVE_CUDA)
#include <cuda_runtime.h>
#endif

namespace ht {

namespace {
/// Number of visible GPUs, and why there are none when 0.
int visible_gpus(std::string* why) {
#if defined(HT_HAVE_CUDA)
  int n = 0;
  cudaError_t rc = cudaGetDeviceCount(&n);
  if (rc != cudaSuccess) {
    if (why) *why = std::string(cudaGetErrorName(rc)) + ": " + cudaGetErrorString(rc);
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

Device select_device(const std::string& requested, int local_rank) {
  std::string why;
  Device d = Device::cpu;
  if (requested == "cpu") {
    d = Device::cpu;
  } else {
    const int n = visible_gpus(&why);
    if (n > 0) {
      d = Device::cuda;
    } else if (requested == "cuda") {
      throw UsageError("train.device = cuda: " + why + ". Run 'hpctrain doctor' for a full diagnosis, or use --train.device cpu");
    }
  }
#if defined(HT_HAVE_CUDA)
  if (d == Device::cuda) cuda::init(local_rank);  // rank binds GPU local_rank among the visible ones
#endif
  if (dist().rank == 0)
    std::cout << "hpctrain: train.device = " << requested << " -> " << device_name(d)
              << (d == Device::cpu && requested == "auto" ? " (" + why + ")" : std::string()) << "\n";
  return d;
}

}  // namespace ht
