#pragma once
// Softmax cross-entropy on the GPU (row kernels; math in src/base/op_math.hpp).
// The GPU half of src/ops/softmax_xent.hpp: same names and arguments as the CPU half, arguments
// already validated by the dispatcher (src/ops/softmax_xent.cpp). Defined in cuda/softmax_xent.cu (CUDA builds).
#include <cstdint>

#include "src/base/op_cache.hpp"
#include "src/base/op_shapes.hpp"
#include "src/base/tensor.hpp"

namespace ht::cuda {

double softmax_xent_forward(const Tensor& logits, const Tensor& labels, float label_smoothing, Tensor& probs,
                            int64_t* correct);
void softmax_xent_backward(const Tensor& probs, const Tensor& labels, float label_smoothing, float scale,
                           Tensor& dlogits);

}  // namespace ht::cuda
