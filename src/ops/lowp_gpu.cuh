#pragma once
// Element access of the GPU kernels in every activation dtype (float32, bfloat16, float16): each
// element is loaded as float, computed on in float (the HT_HD math of each op's header, as on
// the CPU) and stored back rounded to nearest even by the conversions of base/bf16.hpp, the
// same functions the CPU runs, so a GPU kernel and the CPU loop round alike bit for bit.
// Included by the GPU halves (src/ops/*_gpu.cu) only.
#include <cstdint>

#include "base/bf16.hpp"
#include "base/tensor.hpp"

namespace ht::cuda {

// Storage types of the kernels: float, ht::bf16 or ht::f16 (base/bf16.hpp).
HT_HD float load_f(const float* p, int64_t i) { return p[i]; }
HT_HD float load_f(const bf16* p, int64_t i) { return to_f32(p[i]); }
HT_HD float load_f(const f16* p, int64_t i) { return to_f32(p[i]); }
HT_HD void store_f(float* p, int64_t i, float x) { p[i] = x; }
HT_HD void store_f(bf16* p, int64_t i, float x) { p[i] = to_bf16(x); }
HT_HD void store_f(f16* p, int64_t i, float x) { p[i] = to_f16(x); }

/// Calls f(T*) with the tensor's data pointer typed by its dtype (f32, bf16 or f16); any other
/// dtype throws RuntimeError naming `op`.
template <class F>
void with_typed(const Tensor& t, const char* op, F&& f) {
  switch (t.dtype()) {
    case DType::f32: f(static_cast<float*>(t.raw())); return;
    case DType::bf16: f(static_cast<bf16*>(t.raw())); return;
    case DType::f16: f(static_cast<f16*>(t.raw())); return;
    default: throw RuntimeError(std::string(op) + ": dtype " + dtype_name(t.dtype()) + " is not a floating-point activation type");
  }
}

/// As with_typed for two tensors (every pair of the three dtypes).
template <class F>
void with_typed2(const Tensor& a, const Tensor& b, const char* op, F&& f) {
  with_typed(a, op, [&](auto* pa) { with_typed(b, op, [&](auto* pb) { f(pa, pb); }); });
}

}  // namespace ht::cuda
