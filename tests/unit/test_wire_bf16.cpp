// The bf16 wire's conversions and its reduction (mpi/wire_bf16.hpp) without MPI: round to nearest
// even, NaN and infinity kept, one rounding per sum.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>

#include "mpi/wire_bf16.hpp"

using namespace ht;

namespace {
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace

TEST_CASE("bf16 wire: round to nearest even, specials kept", "[bf16][comm]") {
  CHECK(wire::bf16_from_f32(1.0f) == 0x3f80);
  CHECK(wire::bf16_from_f32(from_bits(0x3f808000)) == 0x3f80);  // tie, even below
  CHECK(wire::bf16_from_f32(from_bits(0x3f818000)) == 0x3f82);  // tie, even above
  CHECK(wire::bf16_from_f32(from_bits(0x3f808001)) == 0x3f81);  // above the tie
  CHECK(wire::bf16_from_f32(-2.0f) == 0xc000);
  CHECK(wire::bf16_from_f32(std::numeric_limits<float>::infinity()) == 0x7f80);
  CHECK(wire::bf16_from_f32(std::numeric_limits<float>::max()) == 0x7f80);  // rounds up to infinity
  CHECK(std::isnan(wire::f32_from_bf16(wire::bf16_from_f32(std::nanf("")))));
  CHECK(std::isnan(wire::f32_from_bf16(wire::bf16_from_f32(from_bits(0x7f800001)))));  // signalling NaN stays NaN
  CHECK(wire::f32_from_bf16(0x3f81) == from_bits(0x3f810000));
}

TEST_CASE("bf16 wire: the reduction sums in float32 and rounds once", "[bf16][comm]") {
  // 1 and 1 + 2^-7 are bf16 numbers; their sum 2 + 2^-7 is the tie between 2 and 2 + 2^-6: even, 2.
  const uint16_t a[2] = {wire::bf16_from_f32(1.0f), wire::bf16_from_f32(256.0f)};
  uint16_t b[2] = {wire::bf16_from_f32(1.0078125f), wire::bf16_from_f32(1.0f)};
  wire::sum_into(a, b, 2);
  CHECK(wire::f32_from_bf16(b[0]) == 2.0f);
  CHECK(wire::f32_from_bf16(b[1]) == 256.0f);  // 257 rounds to even (256), once
  const uint16_t inf[1] = {0x7f80};
  uint16_t x[1] = {wire::bf16_from_f32(-3.0f)};
  wire::sum_into(inf, x, 1);
  CHECK(x[0] == 0x7f80);
}
