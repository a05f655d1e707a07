#pragma once
// Helpers of the low-precision GPU tests (tests/gpu/test_gpu_lowp.cpp): inputs rounded to the format
// on the host, uploads into the GPU's bf16/fp16 NHWC activations and downloads back to float32 NCHW
// (src/ops/convert_gpu.hpp), and the tolerance of a result that went through `roundings` roundings to a
// format of `bits` significand bits (bf16: 8, fp16: 11).
#include <cstdint>

#include "src/ops/convert_gpu.hpp"
#include "base/bf16.hpp"
#include "tests/gpu/gpu_test_util.hpp"

namespace ht::gputest {

/// Significand bits (with the implicit one) of a low-precision dtype.
inline int significand_bits(DType t) { return t == DType::bf16 ? 8 : 11; }

/// Unit roundoff of round-to-nearest in that format: 2^-bits.
inline double unit_roundoff(DType t) { return std::ldexp(1.0, -significand_bits(t)); }

/// The bound for a result of `roundings` roundings to t, relative to the largest reference
/// magnitude: each rounding moves an element by at most u times its magnitude (<= the largest), a
/// factor 2 of margin, plus 1e-4 for float32 summation in another order (the fp32 tests' bound).
inline double lowp_tol(DType t, int roundings) { return 2.0 * roundings * unit_roundoff(t) + 1e-4; }

/// A host float32 tensor rounded element-wise to t and widened back (exactly representable in t).
inline Tensor rounded(const Tensor& x, DType t) {
  Tensor r = Tensor::empty(x.shape());
  auto a = x.span<float>();
  auto b = r.span<float>();
  for (size_t i = 0; i < a.size(); ++i) b[i] = t == DType::bf16 ? to_f32(to_bf16(a[i])) : to_f32(to_f16(a[i]));
  return r;
}

/// A GPU tensor of dtype t holding host float32 `x` (rounded; NHWC when 4-D).
inline Tensor gpu_as(const Tensor& x, DType t) {
  Tensor g = gpu(x);
  Tensor out = Tensor::empty(x.shape(), t, Device::cuda);
  cuda::convert_any(g, out);
  return out;
}

/// A GPU tensor of dtype t and logical shape `shape` whose every element is NaN.
inline Tensor poisoned_as(std::vector<int64_t> shape, DType t) { return gpu_as(poisoned(shape).to(Device::cpu), t); }

/// A host float32 tensor (NCHW when 4-D) holding GPU tensor `g` of any dtype.
inline Tensor host_f32(const Tensor& g) {
  Tensor out = Tensor::empty(g.shape(), DType::f32, Device::cuda);
  cuda::convert_any(g, out);
  return host(out);
}

/// rel_err of a GPU tensor of any dtype against a host float32 reference.
inline double rel_err_any(const Tensor& got_gpu, const Tensor& ref) { return rel_err(gpu(host_f32(got_gpu)), ref); }

}  // namespace ht::gputest
