#pragma once
// Batch normalization on the GPU: cuDNN (spatial mode).
// The GPU half of src/ops/batchnorm2d.hpp: same names and arguments as the CPU half, arguments
// already validated by the dispatcher (src/ops/batchnorm2d.cpp). Defined in cuda/batchnorm2d.cu (CUDA builds).
#include <cstdint>

#include "src/base/op_cache.hpp"
#include "src/base/op_shapes.hpp"
#include "src/base/tensor.hpp"

namespace ht::cuda {

void batchnorm2d_forward_train(OpCachePtr& cache, const BatchNormShape& sh, const Tensor& x, const Tensor& gamma,
                               const Tensor& beta, Tensor& y, Tensor& running_mean, Tensor& running_var,
                               Tensor& save_mean, Tensor& save_invstd);
void batchnorm2d_forward_infer(OpCachePtr& cache, const BatchNormShape& sh, const Tensor& x, const Tensor& gamma,
                               const Tensor& beta, const Tensor& running_mean, const Tensor& running_var, Tensor& y);
void batchnorm2d_backward(OpCachePtr& cache, const BatchNormShape& sh, const Tensor& x, const Tensor& dy,
                          const Tensor& gamma, const Tensor& save_mean, const Tensor& save_invstd, Tensor& dx,
                          Tensor& dgamma, Tensor& dbeta, bool accumulate);

}  // namespace ht::cuda
