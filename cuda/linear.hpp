#pragma once
// Fully connected layer on the GPU: cuBLAS GEMM (parameters in cuda/gemm_params.hpp).
// The GPU half of src/ops/linear.hpp: same names and arguments as the CPU half, arguments
// already validated by the dispatcher (src/ops/linear.cpp). Defined in cuda/linear.cu (CUDA builds).
#include <cstdint>

#include "src/base/op_cache.hpp"
#include "src/base/op_shapes.hpp"
#include "src/base/tensor.hpp"

namespace ht::cuda {

void linear_forward(OpCachePtr& cache, const LinearShape& sh, const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y);
void linear_backward(OpCachePtr& cache, const LinearShape& sh, const Tensor& x, const Tensor& w, const Tensor& dy,
                     Tensor* dx, Tensor& dw, Tensor* db, bool accumulate);

}  // namespace ht::cuda
