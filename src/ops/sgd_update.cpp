#include "src/ops/sgd_update.hpp"

namespace ht {

void sgd_update(Device device, float* p, const float* g, float* buf, int64_t n, float lr, float momentum, float wd,
                bool nesterov) {
  if (n < 0 || (n > 0 && (!p || !g || !buf)))
    throw RuntimeError("sgd_update: " + std::to_string(n) + " elements with a null pointer");
  HT_DISPATCH(device, "sgd_update", sgd.update, p, g, buf, n, lr, momentum, wd, nesterov);
}

}  // namespace ht
