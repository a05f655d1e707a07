#pragma once
// bfloat16 for the gradient wire (dist.grad_dtype = bf16): float32 -> bf16 bits (round to nearest
// even, NaN kept quiet), bf16 bits -> float32 (exact), and the MPI reduction that sums two bf16
// vectors in float32 and rounds each sum once. The conversions are base/bf16.hpp's (the shared
// ones, host and device) where that header is in the tree, else the same formula here (a branch
// without it).
#include <cstdint>
#include <cstring>
#include <span>

#if __has_include("base/bf16.hpp")
#include "base/bf16.hpp"
#endif

namespace ht::wire {

#if __has_include("base/bf16.hpp")
/// float -> bf16 bits, round to nearest even; NaN -> quiet NaN (base/bf16.hpp).
inline uint16_t bf16_from_f32(float f) { return bf16_bits_from_f32(f); }
/// bf16 bits -> float (exact).
inline float f32_from_bf16(uint16_t b) { return f32_from_bf16_bits(b); }
#else
/// float -> bf16 bits, round to nearest even; NaN -> quiet NaN (the formula of base/bf16.hpp).
inline uint16_t bf16_from_f32(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
  return static_cast<uint16_t>(nan ? ((u >> 16) | 0x0040u) : rounded);
}
/// bf16 bits -> float (exact).
inline float f32_from_bf16(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
#endif

/// dst[i] = bf16(src[i]).
inline void narrow(std::span<const float> src, uint16_t* dst) {
  for (size_t i = 0; i < src.size(); ++i) dst[i] = bf16_from_f32(src[i]);
}
/// inout[i] = bf16(f32(in[i]) + f32(inout[i])): one rounding per sum (the MPI user operation).
inline void sum_into(const uint16_t* in, uint16_t* inout, size_t n) {
  for (size_t i = 0; i < n; ++i) inout[i] = bf16_from_f32(f32_from_bf16(in[i]) + f32_from_bf16(inout[i]));
}

}  // namespace ht::wire
