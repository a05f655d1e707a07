// base/bf16.hpp: float <-> bfloat16 and float <-> IEEE float16 against PyTorch's conversions
// (the table bf16_torch_table.inc, written by gen_bf16_table.py with torch.bfloat16/float16 on the
// same float32 bit patterns), NaN and infinity handling, and exact round trips of all 2^16 values.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "base/bf16.hpp"

using namespace ht;

namespace {
struct Row {
  uint32_t f32, bf16, f16;
};
const Row kTorch[] = {
#include "bf16_torch_table.inc"
};
bool is_nan16_bf(uint16_t b) { return (b & 0x7fffu) > 0x7f80u; }
bool is_nan16_h(uint16_t h) { return (h & 0x7fffu) > 0x7c00u; }
}  // namespace

TEST_CASE("float -> bf16 and fp16 round to nearest even exactly as torch", "[bf16]") {
  REQUIRE(sizeof(kTorch) / sizeof(kTorch[0]) > 500);
  int bf_bad = 0, h_bad = 0;
  for (const Row& r : kTorch) {
    const float f = f32_from_bits(r.f32);
    if (bf16_bits_from_f32(f) != r.bf16) {
      ++bf_bad;
      UNSCOPED_INFO("bf16 of 0x" << std::hex << r.f32 << ": 0x" << bf16_bits_from_f32(f) << " torch 0x" << r.bf16);
    }
    if (f16_bits_from_f32(f) != r.f16) {
      ++h_bad;
      UNSCOPED_INFO("fp16 of 0x" << std::hex << r.f32 << ": 0x" << f16_bits_from_f32(f) << " torch 0x" << r.f16);
    }
  }
  CHECK(bf_bad == 0);
  CHECK(h_bad == 0);
}

TEST_CASE("bf16 and fp16 hand-checked cases: ties, overflow, subnormals", "[bf16]") {
  // 1 + 2^-8 is the tie between 1 and 1 + 2^-7: even (1) wins; 1 + 3*2^-8 rounds up to 1 + 2^-6.
  CHECK(bf16_bits_from_f32(1.0f + 0x1p-8f) == 0x3f80);
  CHECK(bf16_bits_from_f32(1.0f + 3 * 0x1p-8f) == 0x3f82);
  CHECK(bf16_bits_from_f32(3.4028234663852886e38f) == 0x7f80);  // FLT_MAX rounds up to infinity
  CHECK(f16_bits_from_f32(65504.f) == 0x7bff);
  CHECK(f16_bits_from_f32(65519.f) == 0x7bff);
  CHECK(f16_bits_from_f32(65520.f) == 0x7c00);
  CHECK(f16_bits_from_f32(0x1p-24f) == 0x0001);   // smallest subnormal
  CHECK(f16_bits_from_f32(0x1p-25f) == 0x0000);   // the tie to 0 and 2^-24: even is 0
  CHECK(f16_bits_from_f32(0x1.8p-24f) == 0x0002);  // 1.5 units: tie to even 2
  CHECK(f16_bits_from_f32(-0x1p-14f) == 0x8400);  // smallest normal
  CHECK(f32_from_f16_bits(0x0001) == 0x1p-24f);
  CHECK(f32_from_f16_bits(0x03ff) == 1023 * 0x1p-24f);
  CHECK(f32_from_f16_bits(0x7bff) == 65504.f);
  CHECK(std::signbit(f32_from_f16_bits(0x8000)));
}

TEST_CASE("NaN stays a quiet NaN and infinities are kept", "[bf16]") {
  for (uint32_t nan : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff812345u, 0x7fffffffu}) {
    const float f = f32_from_bits(nan);
    const uint16_t b = bf16_bits_from_f32(f), h = f16_bits_from_f32(f);
    CHECK(is_nan16_bf(b));
    CHECK((b & 0x0040u) != 0);  // quiet bit
    CHECK((b >> 15) == (nan >> 31));
    CHECK(is_nan16_h(h));
    CHECK((h & 0x0200u) != 0);
    CHECK(std::isnan(f32_from_bf16_bits(b)));
    CHECK(std::isnan(f32_from_f16_bits(h)));
  }
  CHECK(bf16_bits_from_f32(INFINITY) == 0x7f80);
  CHECK(bf16_bits_from_f32(-INFINITY) == 0xff80);
  CHECK(f16_bits_from_f32(INFINITY) == 0x7c00);
  CHECK(f16_bits_from_f32(-INFINITY) == 0xfc00);
  CHECK(f32_from_bf16_bits(0xff80) == -INFINITY);
  CHECK(f32_from_f16_bits(0x7c00) == INFINITY);
  CHECK(std::isnan(f32_from_f16_bits(0x7c01)));  // a signalling fp16 NaN widens to a quiet one
  CHECK((f32_bits(f32_from_f16_bits(0x7c01)) & 0x400000u) != 0);
}

TEST_CASE("every bf16 and fp16 value survives the round trip through float exactly", "[bf16]") {
  int bf_bad = 0, h_bad = 0;
  for (uint32_t v = 0; v < 0x10000u; ++v) {
    const auto b = static_cast<uint16_t>(v);
    if (!is_nan16_bf(b) && bf16_bits_from_f32(f32_from_bf16_bits(b)) != b) ++bf_bad;
    if (!is_nan16_h(b) && f16_bits_from_f32(f32_from_f16_bits(b)) != b) ++h_bad;
  }
  CHECK(bf_bad == 0);
  CHECK(h_bad == 0);
}

TEST_CASE("bf16 relative rounding error is at most u = 2^-8 (8 significand bits, to nearest)", "[bf16]") {
  uint32_t s = 12345;
  float worst = 0;
  for (int i = 0; i < 100000; ++i) {
    s = s * 1664525u + 1013904223u;
    const float f = f32_from_bits((s & 0x807fffffu) | (((s >> 23) % 200 + 27) << 23));  // normal, |exp| < 100
    const float r = to_f32(to_bf16(f));
    REQUIRE(std::fabs(r - f) <= std::fabs(f) * 0x1p-8f);
    worst = std::max(worst, std::fabs(r - f) / std::fabs(f));
  }
  CHECK(worst > 0x1p-9f);  // the bound is reached closely: half an ulp is 2^-8 just above a power of two
}
