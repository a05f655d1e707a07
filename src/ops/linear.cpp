#include "src/ops/linear.hpp"

#include "src/ops/weighted_op_args.hpp"

namespace ht {

namespace {
struct LinearDims {
  using Shape = LinearShape;
  static constexpr bool kSameDtypeY = false;  // y (and dy) may be float32 for low-precision x
  static bool valid(const Shape& sh) { return sh.n > 0 && sh.in > 0 && sh.out > 0; }
  static std::string describe(const Shape& sh) {
    return "N=" + std::to_string(sh.n) + " in=" + std::to_string(sh.in) + " out=" + std::to_string(sh.out);
  }
  static std::vector<int64_t> x(const Shape& sh) { return {sh.n, sh.in}; }
  static std::vector<int64_t> w(const Shape& sh) { return {sh.out, sh.in}; }
  static std::vector<int64_t> y(const Shape& sh) { return {sh.n, sh.out}; }
  static std::vector<int64_t> b(const Shape& sh) { return {sh.out}; }
};
}  // namespace

HT_DEFINE_WEIGHTED_OP(linear, LinearShape, LinearDims)

}  // namespace ht
