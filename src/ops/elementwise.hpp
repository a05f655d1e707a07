#pragma once
// Element-wise ops: ReLU, residual add, and the small vector helpers the trainer needs.
#include "base/hd.hpp"
#include "src/ops/op.hpp"

namespace ht {

// The element math, one definition run by the CPU loops (elementwise.cpp) and the CUDA kernels
// (elementwise_gpu.cu; HT_HD is __host__ __device__ under nvcc).
/// NaN propagates (as in PyTorch), so a poisoned input is detected rather than hidden.
HT_HD float relu_fwd(float x) { return x < 0.f ? 0.f : x; }
/// ReLU gradient from the output (y > 0 exactly where x > 0).
HT_HD float relu_bwd(float y, float dy) { return y > 0.f ? dy : 0.f; }
/// True for NaN and +-Inf. Written as a comparison (NaN compares false) so that it needs no
/// <cmath> overloads on the device; valid without -ffast-math, which this project does not use.
HT_HD bool is_nonfinite(float x) { return !(x <= 3.402823466e38f && x >= -3.402823466e38f); }

/// y = max(x, 0); x and y same size, may alias.
void relu_forward(const Tensor& x, Tensor& y);
/// dx = dy where y > 0 else 0; dx may alias dy.
void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx);
/// Residual add y = a + b (same sizes; y may alias a or b). Its backward passes dy unchanged to
/// both inputs, which the layers do with add_inplace into the branch gradients.
void add_forward(const Tensor& a, const Tensor& b, Tensor& y);
/// y += x (same numel).
void add_inplace(Tensor& y, const Tensor& x);
/// y *= s.
void scale_inplace(Tensor& y, float s);
/// Number of NaN or Inf elements of a float32 tensor.
int64_t count_nonfinite(const Tensor& x);

/// The device halves of the functions above, called by them once the arguments are checked (the
/// halves trust their arguments). CPU: src/ops/elementwise.cpp; GPU: src/ops/elementwise_gpu.cu,
/// defined in CUDA builds only (HT_HAVE_CUDA).
void relu_forward_cpu(const Tensor& x, Tensor& y);
void relu_backward_cpu(const Tensor& y, const Tensor& dy, Tensor& dx);
void add_forward_cpu(const Tensor& a, const Tensor& b, Tensor& y);
void add_inplace_cpu(Tensor& y, const Tensor& x);
void scale_inplace_cpu(Tensor& y, float s);
int64_t count_nonfinite_cpu(const Tensor& x);
void relu_forward_gpu(const Tensor& x, Tensor& y);
void relu_backward_gpu(const Tensor& y, const Tensor& dy, Tensor& dx);
void add_forward_gpu(const Tensor& a, const Tensor& b, Tensor& y);
void add_inplace_gpu(Tensor& y, const Tensor& x);
void scale_inplace_gpu(Tensor& y, float s);
int64_t count_nonfinite_gpu(const Tensor& x);

}  // namespace ht
