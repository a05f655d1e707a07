#pragma once
// The GPU half of src/ops/sgd_update.hpp: the same sgd_update_elem (src/base/op_math.hpp) in a
// grid-stride kernel on the compute stream. Defined in cuda/sgd_update.cu (CUDA builds).
#include <cstdint>

namespace ht::cuda {

void sgd_update(float* p, const float* g, float* buf, int64_t n, float lr, float momentum, float wd, bool nesterov);

}  // namespace ht::cuda
