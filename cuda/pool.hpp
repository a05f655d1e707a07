#pragma once
// Pooling on the GPU: cuDNN max pooling, own kernel for the global average.
// The GPU half of src/ops/pool.hpp: same names and arguments as the CPU half, arguments
// already validated by the dispatcher (src/ops/pool.cpp). Defined in cuda/pool.cu (CUDA builds).
#include <cstdint>

#include "src/base/op_cache.hpp"
#include "src/base/op_shapes.hpp"
#include "src/base/tensor.hpp"

namespace ht::cuda {

void maxpool2d_forward(OpCachePtr& cache, const PoolShape& sh, const Tensor& x, Tensor& y);
void maxpool2d_backward(OpCachePtr& cache, const PoolShape& sh, const Tensor& x, const Tensor& y, const Tensor& dy,
                        Tensor& dx);
void global_avgpool_forward(OpCachePtr& cache, const Tensor& x, Tensor& y);
void global_avgpool_backward(OpCachePtr& cache, const Tensor& dy, Tensor& dx);

}  // namespace ht::cuda
