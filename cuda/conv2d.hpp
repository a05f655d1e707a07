#pragma once
// 2-D convolution on the GPU: cuDNN (algorithm chosen once per shape, cuda/conv_algo.hpp).
// The GPU half of src/ops/conv2d.hpp: same names and arguments as the CPU half, arguments
// already validated by the dispatcher (src/ops/conv2d.cpp). Defined in cuda/conv2d.cu (CUDA builds).
#include <cstdint>

#include "src/base/op_cache.hpp"
#include "src/base/op_shapes.hpp"
#include "src/base/tensor.hpp"

namespace ht::cuda {

void conv2d_forward(OpCachePtr& cache, const Conv2dShape& sh, const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y);
void conv2d_backward(OpCachePtr& cache, const Conv2dShape& sh, const Tensor& x, const Tensor& w, const Tensor& dy,
                     Tensor* dx, Tensor& dw, Tensor* db, bool accumulate);

}  // namespace ht::cuda
