// elementwise: the dispatcher (arguments checked once, then this file's CPU half or the GPU half in
// src/ops/elementwise_gpu.cu, CUDA builds only) and the CPU half.
#include "src/ops/elementwise.hpp"

#include <cstdint>
#include <string>

#include "base/bf16.hpp"

namespace ht {

void relu_forward(const Tensor& x, Tensor& y) {
  const OpArgs a("relu_forward", x);
  a.act(x, "x").act(y, "y").same_dtype(x, "x", y, "y").same_numel(x, "x", y, "y");
  if (a.device() == Device::cpu) return relu_forward_cpu(x, y);
  if constexpr (kHaveCuda) return relu_forward_gpu(x, y);
  no_cuda("relu_forward");
}

void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  const OpArgs a("relu_backward", y);
  a.act(y, "y").act(dy, "dy").act(dx, "dx").same_dtype(y, "y", dy, "dy").same_dtype(y, "y", dx, "dx").same_numel(y, "y", dy, "dy").same_numel(y, "y", dx, "dx");
  if (a.device() == Device::cpu) return relu_backward_cpu(y, dy, dx);
  if constexpr (kHaveCuda) return relu_backward_gpu(y, dy, dx);
  no_cuda("relu_backward");
}

void add_forward(const Tensor& a_, const Tensor& b, Tensor& y) {
  const OpArgs a("add_forward", a_);
  a.act(a_, "a").act(b, "b").act(y, "y").same_dtype(a_, "a", b, "b").same_dtype(a_, "a", y, "y").same_numel(a_, "a", b, "b").same_numel(a_, "a", y, "y");
  if (a.device() == Device::cpu) return add_forward_cpu(a_, b, y);
  if constexpr (kHaveCuda) return add_forward_gpu(a_, b, y);
  no_cuda("add_forward");
}

void add_inplace(Tensor& y, const Tensor& x) {
  const OpArgs a("add_inplace", y);
  a.f32(y, "y").f32(x, "x").same_numel(y, "y", x, "x");
  if (a.device() == Device::cpu) return add_inplace_cpu(y, x);
  if constexpr (kHaveCuda) return add_inplace_gpu(y, x);
  no_cuda("add_inplace");
}

void scale_inplace(Tensor& y, float s) {
  const OpArgs a("scale_inplace", y);
  a.f32(y, "y");
  if (a.device() == Device::cpu) return scale_inplace_cpu(y, s);
  if constexpr (kHaveCuda) return scale_inplace_gpu(y, s);
  no_cuda("scale_inplace");
}

int64_t count_nonfinite(const Tensor& x) {
  const OpArgs a("count_nonfinite", x);
  a.f32(x, "x");
  if (a.device() == Device::cpu) return count_nonfinite_cpu(x);
  if constexpr (kHaveCuda) return count_nonfinite_gpu(x);
  no_cuda("count_nonfinite");
}

}  // namespace ht

// ---- The CPU half ----
// CPU element-wise ops: plain loops over the HT_HD math of elementwise.hpp, vectorisable, and
// typed by the activations' dtype (float32, or bf16/fp16 with float math and RNE rounding), and
// split across OpenMP threads only when the tensor is large enough to pay for the fork.
namespace ht {
namespace {

// Below this many elements a parallel region costs more than it saves.
constexpr int64_t kParallelMin = 1 << 15;

/// Element access in the tensors' dtype with float math (bf16/fp16 rounded by base/bf16.hpp).
struct F32 {
  using T = float;
  static float ld(T v) { return v; }
  static T st(float v) { return v; }
};
struct BF16 {
  using T = uint16_t;
  static float ld(T v) { return f32_from_bf16_bits(v); }
  static T st(float v) { return bf16_bits_from_f32(v); }
};
struct F16 {
  using T = uint16_t;
  static float ld(T v) { return f32_from_f16_bits(v); }
  static T st(float v) { return f16_bits_from_f32(v); }
};

/// Runs body.template operator()<Fmt>() with the format of dtype t.
template <class Body>
void by_dtype(DType t, Body&& body) {
  if (t == DType::bf16) body.template operator()<BF16>();
  else if (t == DType::f16) body.template operator()<F16>();
  else body.template operator()<F32>();
}

}  // namespace

// The CPU half: the functions declared in src/ops/elementwise.hpp.
void relu_forward_cpu(const Tensor& x, Tensor& y) {
  by_dtype(x.dtype(), [&]<class F>() {
    using T = typename F::T;
    const T* xp = static_cast<const T*>(x.raw());
    T* yp = static_cast<T*>(y.raw());
    const int64_t n = x.numel();
#pragma omp parallel for simd if (n >= kParallelMin) schedule(static)
    for (int64_t i = 0; i < n; ++i) yp[i] = F::st(relu_fwd(F::ld(xp[i])));
  });
}

void relu_backward_cpu(const Tensor& y, const Tensor& dy, Tensor& dx) {
  by_dtype(y.dtype(), [&]<class F>() {
    using T = typename F::T;
    const T* yp = static_cast<const T*>(y.raw());
    const T* dyp = static_cast<const T*>(dy.raw());
    T* dxp = static_cast<T*>(dx.raw());
    const int64_t n = y.numel();
#pragma omp parallel for simd if (n >= kParallelMin) schedule(static)
    for (int64_t i = 0; i < n; ++i) dxp[i] = F::st(relu_bwd(F::ld(yp[i]), F::ld(dyp[i])));
  });
}

void add_forward_cpu(const Tensor& a, const Tensor& b, Tensor& y) {
  by_dtype(a.dtype(), [&]<class F>() {
    using T = typename F::T;
    const T* ap = static_cast<const T*>(a.raw());
    const T* bp = static_cast<const T*>(b.raw());
    T* yp = static_cast<T*>(y.raw());
    const int64_t n = a.numel();
#pragma omp parallel for simd if (n >= kParallelMin) schedule(static)
    for (int64_t i = 0; i < n; ++i) yp[i] = F::st(F::ld(ap[i]) + F::ld(bp[i]));
  });
}

void add_inplace_cpu(Tensor& y, const Tensor& x) {
  float* yp = y.data<float>();
  const float* xp = x.data<float>();
  const int64_t n = y.numel();
#pragma omp parallel for simd if (n >= kParallelMin) schedule(static)
  for (int64_t i = 0; i < n; ++i) yp[i] += xp[i];
}

void scale_inplace_cpu(Tensor& y, float s) {
  float* yp = y.data<float>();
  const int64_t n = y.numel();
#pragma omp parallel for simd if (n >= kParallelMin) schedule(static)
  for (int64_t i = 0; i < n; ++i) yp[i] *= s;
}

int64_t count_nonfinite_cpu(const Tensor& x) {
  const float* xp = x.data<float>();
  const int64_t n = x.numel();
  int64_t count = 0;
#pragma omp parallel for simd if (n >= kParallelMin) schedule(static) reduction(+ : count)
  for (int64_t i = 0; i < n; ++i) count += is_nonfinite(xp[i]) ? 1 : 0;
  return count;
}

}  // namespace ht
