#pragma once
// One SGD-with-momentum update over a contiguous range of parameters, PyTorch torch.optim.SGD
// semantics (dampening 0): g = grad + wd*p; buf = momentum*buf + g; g = nesterov ? g + momentum*buf
// : buf; p -= lr*g.
#include <cstdint>

#include "base/hd.hpp"
#include "src/ops/op.hpp"

namespace ht {

/// One element of the update above, the one definition run by the CPU loop (sgd_update.cpp) and the
/// CUDA kernel (sgd_update_gpu.cu; HT_HD is __host__ __device__ under nvcc).
HT_HD void sgd_update_elem(float& p, float grad, float& buf, float lr, float momentum, float wd, bool nesterov) {
  float g = grad + wd * p;
  buf = momentum * buf + g;
  if (nesterov) g = g + momentum * buf;
  else g = buf;
  p -= lr * g;
}

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
