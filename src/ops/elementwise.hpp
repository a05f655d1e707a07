#pragma once
// Element-wise ops: ReLU, residual add, and the small vector helpers the trainer needs.
// The per-element math is in the HT_HD functions below, run by both the CPU loops
// (src/ops/elementwise_cpu.cpp) and the CUDA kernels (cuda/elementwise.cu).
#include "src/base/hd.hpp"
#include "src/ops/op.hpp"

namespace ht {

/// NaN propagates (as in PyTorch), so a poisoned input is detected rather than hidden.
HT_HD float relu_fwd(float x) { return x < 0.f ? 0.f : x; }
/// ReLU gradient from the output (y > 0 exactly where x > 0).
HT_HD float relu_bwd(float y, float dy) { return y > 0.f ? dy : 0.f; }
/// True for NaN and +-Inf. Written as a comparison (NaN compares false) so that it needs no
/// <cmath> overloads on the device; valid without -ffast-math, which this project does not use.
HT_HD bool is_nonfinite(float x) { return !(x <= 3.402823466e38f && x >= -3.402823466e38f); }

namespace cpu {
void relu_forward(const Tensor& x, Tensor& y);
void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx);
void add_forward(const Tensor& a, const Tensor& b, Tensor& y);
void add_inplace(Tensor& y, const Tensor& x);
void scale_inplace(Tensor& y, float s);
int64_t count_nonfinite(const Tensor& x);
}  // namespace cpu
namespace cuda {
void relu_forward(const Tensor& x, Tensor& y);
void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx);
void add_forward(const Tensor& a, const Tensor& b, Tensor& y);
void add_inplace(Tensor& y, const Tensor& x);
void scale_inplace(Tensor& y, float s);
int64_t count_nonfinite(const Tensor& x);
}  // namespace cuda

/// y = max(x, 0); x and y same shape, may alias.
inline void relu_forward(const Tensor& x, Tensor& y) { HT_DISPATCH(x.device(), relu_forward, x, y); }
/// dx = dy where y > 0 else 0; dx may alias dy.
inline void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  HT_DISPATCH(y.device(), relu_backward, y, dy, dx);
}
/// Residual add y = a + b (same shapes; y may alias a or b). Its backward passes dy unchanged to
/// both inputs, which the layers do with add_inplace into the branch gradients.
inline void add_forward(const Tensor& a, const Tensor& b, Tensor& y) { HT_DISPATCH(a.device(), add_forward, a, b, y); }
/// y += x (same numel).
inline void add_inplace(Tensor& y, const Tensor& x) { HT_DISPATCH(y.device(), add_inplace, y, x); }
/// y *= s.
inline void scale_inplace(Tensor& y, float s) { HT_DISPATCH(y.device(), scale_inplace, y, s); }
/// Number of NaN or Inf elements of a float32 tensor.
inline int64_t count_nonfinite(const Tensor& x) {
  int64_t r = 0;
  if (x.device() == Device::cpu) r = cpu::count_nonfinite(x);
#if defined(HT_HAVE_CUDA)
  else r = cuda::count_nonfinite(x);
#else
  else throw RuntimeError("count_nonfinite: this hpctrain was built without CUDA");
#endif
  return r;
}

}  // namespace ht
