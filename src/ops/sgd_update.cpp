// sgd_update: the dispatcher (arguments checked once, then this file's CPU half or the GPU half in
// src/ops/sgd_update_gpu.cu, CUDA builds only) and the CPU half.
#include "src/ops/sgd_update.hpp"

namespace ht {

void sgd_update(Device device, float* p, const float* g, float* buf, int64_t n, float lr, float momentum, float wd,
                bool nesterov) {
  if (n < 0 || (n > 0 && (!p || !g || !buf)))
    throw RuntimeError("sgd_update: " + std::to_string(n) + " elements with a null pointer");
  if (device == Device::cpu) return sgd_update_cpu(p, g, buf, n, lr, momentum, wd, nesterov);
  if constexpr (kHaveCuda) return sgd_update_gpu(p, g, buf, n, lr, momentum, wd, nesterov);
  no_cuda("sgd_update");
}

}  // namespace ht

// ---- The CPU half ----
// The CPU half of sgd_update: one vectorised loop over the same element math as the GPU kernel.
namespace ht {

// The CPU half: the functions declared in src/ops/sgd_update.hpp.
void sgd_update_cpu(float* p, const float* g, float* buf, int64_t n, float lr, float momentum, float wd, bool nesterov) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) sgd_update_elem(p[i], g[i], buf[i], lr, momentum, wd, nesterov);
}

}  // namespace ht
