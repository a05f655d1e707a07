// Fletcher-32 as HDF5 computes it (io/fletcher32.hpp).
#include "io/fletcher32.hpp"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <cstring>

namespace ht {

// HDF5's Fletcher-32 (H5checksum.c, H5_checksum_fletcher32) over big-endian 16-bit words w_0..w_{n-1}
// (an odd last byte counts as its high byte). HDF5 folds its two 32-bit sums with end-around carry,
// which keeps them congruent modulo 65535 and positive once any word is non-zero; so its result is
// f(S) | f(T) << 16 with S = sum w_i, T = sum (n - i) w_i and f(0) = 0, f(x) = 1 + (x - 1) mod 65535.
// Blocks of 8 KiB are copied to dst (when non-null) and summed from L1 in 16 lanes of 32-bit sums
// with no multiplies (SSE2 on x86-64; a portable loop elsewhere): about 3x the earlier 64-bit loop.
uint32_t fletcher32_copy(unsigned char* dst, const unsigned char* src, size_t nbytes) {
  constexpr uint64_t kMod = 65535;
  constexpr size_t kLanes = 16;                 // words summed side by side (vector lanes)
  constexpr size_t kGroups = 256;               // q below 65535 * 256 * 255 / 2 < 2^32
  constexpr size_t kBlock = kLanes * kGroups;   // 4096 words = 8 KiB, stays in L1 after the copy
  size_t n = nbytes / 2;
  uint64_t S = 0, T = 0;                        // S exact; T modulo 65535
  size_t i0 = 0;
  for (; i0 + kBlock <= n; i0 += kBlock) {
    const unsigned char* p = src + 2 * i0;
    if (dst) {
      std::memcpy(dst + 2 * i0, p, 2 * kBlock);
      p = dst + 2 * i0;
    }
    // Lane l sums words l, l + L, l + 2L, ... (s) and, before each group, adds its running sum (q).
    // Then the block's sum_i (kBlock - i) w_i = L * sum_l q_l + sum_l (L - l) s_l: no multiplies.
    uint32_t s[kLanes] = {}, q[kLanes] = {};
#if defined(__SSE2__)
    {  // the same loop in SSE2 (x86-64 baseline): GCC does not vectorise the byte swap + widening
      const __m128i zero = _mm_setzero_si128();
      __m128i s0 = zero, s1 = zero, s2 = zero, s3 = zero, q0 = zero, q1 = zero, q2 = zero, q3 = zero;
      for (size_t g = 0; g < kGroups; ++g) {
        __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 32 * g));
        __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 32 * g + 16));
        a = _mm_or_si128(_mm_slli_epi16(a, 8), _mm_srli_epi16(a, 8));  // big-endian words
        b = _mm_or_si128(_mm_slli_epi16(b, 8), _mm_srli_epi16(b, 8));
        q0 = _mm_add_epi32(q0, s0), q1 = _mm_add_epi32(q1, s1), q2 = _mm_add_epi32(q2, s2), q3 = _mm_add_epi32(q3, s3);
        s0 = _mm_add_epi32(s0, _mm_unpacklo_epi16(a, zero));  // lanes 0-3
        s1 = _mm_add_epi32(s1, _mm_unpackhi_epi16(a, zero));  // lanes 4-7
        s2 = _mm_add_epi32(s2, _mm_unpacklo_epi16(b, zero));  // lanes 8-11
        s3 = _mm_add_epi32(s3, _mm_unpackhi_epi16(b, zero));  // lanes 12-15
      }
      _mm_storeu_si128(reinterpret_cast<__m128i*>(s), s0), _mm_storeu_si128(reinterpret_cast<__m128i*>(s + 4), s1);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(s + 8), s2), _mm_storeu_si128(reinterpret_cast<__m128i*>(s + 12), s3);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q), q0), _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 4), q1);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 8), q2), _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 12), q3);
    }
#else
    for (size_t g = 0; g < kGroups; ++g)
      for (size_t l = 0; l < kLanes; ++l) {
        uint32_t w = (static_cast<uint32_t>(p[2 * (g * kLanes + l)]) << 8) | p[2 * (g * kLanes + l) + 1];
        q[l] += s[l];
        s[l] += w;
      }
#endif
    uint64_t sb = 0, tb = 0;
    for (size_t l = 0; l < kLanes; ++l) sb += s[l], tb += kLanes * uint64_t(q[l]) + (kLanes - l) * uint64_t(s[l]);
    // words after this block weigh in too: sum_i (n - i0 - i) w_i = tb + (n - i0 - kBlock) * sb
    T = (T + tb % kMod + ((n - i0 - kBlock) % kMod) * (sb % kMod)) % kMod;
    S += sb;
  }
  for (size_t i = i0; i < n; ++i) {
    uint64_t w = (static_cast<uint32_t>(src[2 * i]) << 8) | src[2 * i + 1];
    S += w;
    T = (T + ((n - i) % kMod) * w) % kMod;
  }
  if (dst && i0 < n) std::memcpy(dst + 2 * i0, src + 2 * i0, 2 * (n - i0));
  if (nbytes % 2) {
    uint32_t w = static_cast<uint32_t>(src[nbytes - 1]) << 8;
    if (dst) dst[nbytes - 1] = src[nbytes - 1];
    S += w;
    T = (T + S) % kMod;  // the extra word is added to sum1, then sum1 to sum2
  }
  // HDF5's folded sums are 0 only when every word is 0, else in [1, 65535]
  auto f = [](uint64_t x) -> uint32_t { return x == 0 ? 0u : static_cast<uint32_t>(1 + (x - 1) % kMod); };
  uint32_t fT = S == 0 ? 0u : (T == 0 ? 65535u : static_cast<uint32_t>(T));
  return (fT << 16) | f(S);
}

uint32_t fletcher32_reference(const unsigned char* data, size_t nbytes) {
  size_t len = nbytes / 2;
  uint32_t sum1 = 0, sum2 = 0;
  while (len) {
    size_t tlen = len > 360 ? 360 : len;
    len -= tlen;
    do {
      sum1 += static_cast<uint32_t>((static_cast<uint32_t>(data[0]) << 8) | data[1]);
      data += 2;
      sum2 += sum1;
    } while (--tlen);
    sum1 = (sum1 & 0xffff) + (sum1 >> 16);
    sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  }
  if (nbytes % 2) {
    sum1 += static_cast<uint32_t>(*data) << 8;
    sum2 += sum1;
    sum1 = (sum1 & 0xffff) + (sum1 >> 16);
    sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  }
  sum1 = (sum1 & 0xffff) + (sum1 >> 16);
  sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  return (sum2 << 16) | sum1;
}

}  // namespace ht
