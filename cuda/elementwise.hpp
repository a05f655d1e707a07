#pragma once
// Element-wise kernels on the GPU (the math is src/base/op_math.hpp, shared with the CPU).
// The GPU half of src/ops/elementwise.hpp: same names and arguments as the CPU half, arguments
// already validated by the dispatcher (src/ops/elementwise.cpp). Defined in cuda/elementwise.cu (CUDA builds).
#include <cstdint>

#include "src/base/op_cache.hpp"
#include "src/base/op_shapes.hpp"
#include "src/base/tensor.hpp"

namespace ht::cuda {

void relu_forward(const Tensor& x, Tensor& y);
void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx);
void add_forward(const Tensor& a, const Tensor& b, Tensor& y);
void add_inplace(Tensor& y, const Tensor& x);
void scale_inplace(Tensor& y, float s);
int64_t count_nonfinite(const Tensor& x);

}  // namespace ht::cuda
