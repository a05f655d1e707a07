#include "src/ops/sgd_update.hpp"

namespace ht {

void sgd_update(Device device, float* p, const float* g, float* buf, int64_t n, float lr, float momentum, float wd,
                bool nesterov) {
  if (n < 0 || (n > 0 && (!p || !g || !buf)))
    throw RuntimeError("sgd_update: " + std::to_string(n) + " elements with a null pointer");
  if (device == Device::cpu) return sgd_update_cpu(p, g, buf, n, lr, momentum, wd, nesterov);
#if defined(HT_HAVE_CUDA)
  return sgd_update_gpu(p, g, buf, n, lr, momentum, wd, nesterov);
#else
  no_cuda("sgd_update");
#endif
}

}  // namespace ht
