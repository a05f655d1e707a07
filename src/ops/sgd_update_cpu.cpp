// The CPU half of sgd_update: one vectorised loop over the same element math as the GPU kernel.
#include "src/ops/sgd_update.hpp"

namespace ht::cpu {

namespace {

void sgd_update(float* p, const float* g, float* buf, int64_t n, float lr, float momentum, float wd, bool nesterov) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) sgd_update_elem(p[i], g[i], buf[i], lr, momentum, wd, nesterov);
}

}  // namespace

}  // namespace ht::cpu

namespace ht {

// The CPU half declared in src/ops/sgd_update.hpp.
void sgd_update_cpu(float* p, const float* g, float* buf, int64_t n, float lr, float momentum, float wd,
                    bool nesterov) {
  cpu::sgd_update(p, g, buf, n, lr, momentum, wd, nesterov);
}

}  // namespace ht
