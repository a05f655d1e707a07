#pragma once
// One SGD-with-momentum update over a contiguous range of parameters, PyTorch torch.optim.SGD
// semantics (dampening 0): g = grad + wd*p; buf = momentum*buf + g; g = nesterov ? g + momentum*buf
// : buf; p -= lr*g. The element math is sgd_update_elem (src/ops/op_math.hpp), shared by the CPU
// loop (src/ops/sgd_update.cpp) and the CUDA kernel (src/ops/sgd_update_gpu.cu).
#include <cstdint>

#include "src/ops/op_math.hpp"
#include "src/ops/op.hpp"

namespace ht {

/// Updates n float32 parameters p from gradients g and momentum buffers buf, all on `device`
/// (raw pointers into the flat parameter buffers; n may be 0).
void sgd_update(Device device, float* p, const float* g, float* buf, int64_t n, float lr, float momentum, float wd,
                bool nesterov);
/// The device halves of sgd_update, called by it once the arguments are checked: CPU
/// src/ops/sgd_update.cpp; GPU src/ops/sgd_update_gpu.cu, defined in CUDA builds only (HT_HAVE_CUDA).
void sgd_update_cpu(float* p, const float* g, float* buf, int64_t n, float lr, float momentum, float wd,
                    bool nesterov);
void sgd_update_gpu(float* p, const float* g, float* buf, int64_t n, float lr, float momentum, float wd,
                    bool nesterov);

}  // namespace ht
