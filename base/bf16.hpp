#pragma once
// The low-precision number formats, written once for both devices (HT_HD: __host__ __device__
// under nvcc), so the CPU's element-wise loops and the CUDA kernels round identically and CPU tests
// cover the GPU's arithmetic.
//   bfloat16: 1 sign, 8 exponent, 7 stored significand bits (8 with the implicit one): the float32
//             range; rounding to nearest has a relative error of at most u = 2^-8 (half an ulp; the
//             ulp is 2^-7 of the value's power of two).
//   float16:  IEEE 754 binary16: 1 sign, 5 exponent, 10 stored significand bits; largest finite
//             65504, smallest normal 2^-14, subnormals down to 2^-24.
// float -> bf16/fp16 round to nearest, ties to even; overflow gives infinity (fp16 from |x| >= 65520);
// infinities are kept; NaN stays NaN and is made quiet, keeping the sign and the top payload bits
// (PyTorch 1.13 itself is not consistent here: its scalar path gives 0x7FC0 for every NaN, its
// vectorised CPU path 0xFFFF; both are quiet NaNs, as ours). bf16/fp16 -> float is exact.
// Storage types: ht::bf16 and ht::f16 hold the 16 bits (Tensor dtypes DType::bf16 / DType::f16).
#include <bit>
#include <cstdint>

#include "base/hd.hpp"

namespace ht {

/// A bfloat16 value's 16 bits (the top half of the float32 with the same sign and exponent).
struct bf16 {
  uint16_t bits;
};
/// An IEEE binary16 value's 16 bits.
struct f16 {
  uint16_t bits;
};

/// The bit pattern of a float and back (the intrinsics on the device, std::bit_cast on the host).
#if defined(__CUDA_ARCH__)
HT_HD uint32_t f32_bits(float f) { return __float_as_uint(f); }
HT_HD float f32_from_bits(uint32_t u) { return __uint_as_float(u); }
#else
HT_HD uint32_t f32_bits(float f) { return std::bit_cast<uint32_t>(f); }
HT_HD float f32_from_bits(uint32_t u) { return std::bit_cast<float>(u); }
#endif

// ---- bfloat16 ----
/// float -> bf16 bits, round to nearest even; NaN -> quiet NaN (sign and top payload kept).
/// Branch-free, so the CPU loops over it vectorise.
HT_HD uint16_t bf16_bits_from_f32(float f) {
  const uint32_t u = f32_bits(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
  return static_cast<uint16_t>(nan ? ((u >> 16) | 0x0040u) : rounded);
}
/// bf16 bits -> float (exact).
HT_HD float f32_from_bf16_bits(uint16_t b) { return f32_from_bits(static_cast<uint32_t>(b) << 16); }
HT_HD bf16 to_bf16(float f) { return bf16{bf16_bits_from_f32(f)}; }
HT_HD float to_f32(bf16 b) { return f32_from_bf16_bits(b.bits); }

// ---- float16 (IEEE binary16) ----
/// float -> fp16 bits, round to nearest even, with subnormals; |x| >= 65520 -> infinity; NaN ->
/// quiet NaN (sign and top payload kept).
HT_HD uint16_t f16_bits_from_f32(float f) {
  const uint32_t u = f32_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN, quiet
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 (or inf): infinity
  if (a >= 0x38800000u) {  // normal in fp16 (>= 2^-14): rebias the exponent, round the 13 dropped bits
    const uint32_t r = a - 0x38000000u + 0xfffu + ((a >> 13) & 1u);
    return static_cast<uint16_t>(sign | (r >> 13));  // a carry into the exponent is the right result
  }
  // Subnormal (or zero) in fp16: the value in units of 2^-24, m * 2^(e-150) / 2^-24 = m >> (126-e).
  const int e = static_cast<int>(a >> 23);
  if (e < 102) return static_cast<uint16_t>(sign);  // below 2^-25: rounds to zero
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const int shift = 126 - e;  // 14..24
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;  // q == 0x400 is the smallest normal: still right
  return static_cast<uint16_t>(sign | q);
}
/// fp16 bits -> float (exact; subnormals normalised; NaN payload kept, made quiet).
HT_HD float f32_from_f16_bits(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu;
  uint32_t m = h & 0x3ffu;
  if (e == 0x1f) return f32_from_bits(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u));
  if (e != 0) return f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
  if (m == 0) return f32_from_bits(sign);
  int ex = 113;  // m * 2^-24: shift the leading one up to bit 10
  while ((m & 0x400u) == 0) {
    m <<= 1;
    --ex;
  }
  return f32_from_bits(sign | (static_cast<uint32_t>(ex) << 23) | ((m & 0x3ffu) << 13));
}
HT_HD f16 to_f16(float f) { return f16{f16_bits_from_f32(f)}; }
HT_HD float to_f32(f16 h) { return f32_from_f16_bits(h.bits); }

}  // namespace ht
