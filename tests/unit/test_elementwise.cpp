// Element-wise ops: ReLU against finite differences (inputs kept away from the kink at 0), exact
// results for add/add_inplace/scale (including aliasing and the OpenMP-sized path), and
// count_nonfinite on NaN, +-Inf and large finite values.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "src/ops/elementwise.hpp"
#include "tests/unit/gradcheck.hpp"
#include "tests/unit/tensor_test_util.hpp"

using namespace ht;
using namespace ht::test;

namespace {

std::vector<float> to_fvec(const Tensor& t) {
  auto s = t.span<float>();
  return {s.begin(), s.end()};
}

/// Random values in [-1,1] pushed at least 0.1 away from 0.
std::vector<double> away_from_zero(size_t n, uint32_t seed) {
  auto v = random_vec(n, seed);
  for (auto& x : v) x = x < 0 ? x - 0.1 : x + 0.1;
  return v;
}

}  // namespace

TEST_CASE("relu backward matches finite differences", "[elementwise][gradcheck]") {
  const auto x = away_from_zero(60, 1);
  const auto g = random_vec(60, 2);
  const auto num = numeric_grad(
      [&](const std::vector<double>& v) {
        double s = 0;
        for (size_t i = 0; i < v.size(); ++i) s += g[i] * std::max(v[i], 0.0);
        return s;
      },
      x);
  auto tx = to_tensor(x, {3, 4, 5}), ty = Tensor::empty({3, 4, 5}), tdy = to_tensor(g, {3, 4, 5});
  auto tdx = Tensor::empty({3, 4, 5});
  relu_forward_cpu(tx, ty);
  relu_backward_cpu(ty, tdy, tdx);
  auto d = to_fvec(tdx);
  CHECK(max_rel_err(std::vector<double>(d.begin(), d.end()), num) < 1e-6);
  // Forward is exact.
  auto y = to_fvec(ty), xf = to_fvec(tx);
  for (size_t i = 0; i < y.size(); ++i) CHECK(y[i] == std::max(xf[i], 0.f));
}

TEST_CASE("relu in place and on a large tensor", "[elementwise]") {
  const size_t n = (1 << 16) + 3;  // above the parallel threshold, not a multiple of the vector width
  auto t = to_tensor(random_vec(n, 3), {static_cast<int64_t>(n)});
  const auto before = to_fvec(t);
  relu_forward_cpu(t, t);  // y aliases x
  auto after = to_fvec(t);
  for (size_t i = 0; i < n; ++i) REQUIRE(after[i] == (before[i] > 0 ? before[i] : 0.f));
  auto dy = to_tensor(random_vec(n, 4), {static_cast<int64_t>(n)});
  const auto dyv = to_fvec(dy);
  relu_backward_cpu(t, dy, dy);  // dx aliases dy
  auto dx = to_fvec(dy);
  for (size_t i = 0; i < n; ++i) REQUIRE(dx[i] == (after[i] > 0 ? dyv[i] : 0.f));
}

TEST_CASE("residual add, add_inplace and scale_inplace are exact", "[elementwise]") {
  for (size_t n : {size_t{37}, size_t{(1 << 16) + 5}}) {
    CAPTURE(n);
    const int64_t sn = static_cast<int64_t>(n);
    auto a = to_tensor(random_vec(n, 5), {sn}), b = to_tensor(random_vec(n, 6), {sn}), y = Tensor::empty({sn});
    const auto av = to_fvec(a), bv = to_fvec(b);
    add_forward_cpu(a, b, y);
    auto yv = to_fvec(y);
    for (size_t i = 0; i < n; ++i) REQUIRE(yv[i] == av[i] + bv[i]);
    add_forward_cpu(a, b, a);  // y aliases a
    CHECK(to_fvec(a) == yv);
    add_inplace_cpu(y, b);
    auto y2 = to_fvec(y);
    for (size_t i = 0; i < n; ++i) REQUIRE(y2[i] == yv[i] + bv[i]);
    scale_inplace_cpu(y, -0.375f);
    auto y3 = to_fvec(y);
    for (size_t i = 0; i < n; ++i) REQUIRE(y3[i] == y2[i] * -0.375f);
  }
  // add_inplace works across shapes with the same element count (flat gradient buffers).
  auto flat = Tensor::zeros({6}), grid = to_tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  add_inplace_cpu(flat, grid);
  CHECK(to_fvec(flat) == std::vector<float>{1, 2, 3, 4, 5, 6});
  auto wrong = Tensor::zeros({5});
  CHECK_THROWS_AS(add_inplace(wrong, grid), RuntimeError);
  auto ints = Tensor::zeros({6}, DType::i32);
  CHECK_THROWS_AS(add_inplace(flat, ints), RuntimeError);
}

TEST_CASE("residual add backward passes dy to both inputs (finite differences)", "[elementwise][gradcheck]") {
  const auto a = random_vec(20, 7), b = random_vec(20, 8), g = random_vec(20, 9);
  auto f = [&](const std::vector<double>& av, const std::vector<double>& bv) {
    auto ta = to_tensor(av, {20}), tb = to_tensor(bv, {20}), ty = Tensor::empty({20});
    add_forward_cpu(ta, tb, ty);
    double s = 0;
    for (size_t i = 0; i < 20; ++i) s += g[i] * ty.span<float>()[i];
    return s;
  };
  // Float forward: a step of 1e-2 keeps the rounding error of a+b well below the tolerance.
  const auto na = numeric_grad([&](const std::vector<double>& v) { return f(v, b); }, a, 1e-2);
  const auto nb = numeric_grad([&](const std::vector<double>& v) { return f(a, v); }, b, 1e-2);
  CHECK(max_rel_err(na, g) < 1e-5);
  CHECK(max_rel_err(nb, g) < 1e-5);
}

TEST_CASE("count_nonfinite finds NaN and Inf only", "[elementwise]") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  CHECK(is_nonfinite(nan));
  CHECK(is_nonfinite(inf));
  CHECK(is_nonfinite(-inf));
  CHECK_FALSE(is_nonfinite(std::numeric_limits<float>::max()));
  CHECK_FALSE(is_nonfinite(-std::numeric_limits<float>::max()));
  CHECK_FALSE(is_nonfinite(std::numeric_limits<float>::denorm_min()));
  CHECK_FALSE(is_nonfinite(0.f));

  for (int64_t n : {int64_t{10}, int64_t{(1 << 16) + 7}}) {
    CAPTURE(n);
    auto t = Tensor::zeros({n});
    auto s = t.span<float>();
    CHECK(count_nonfinite_cpu(t) == 0);
    s[0] = nan;
    s[n - 1] = inf;
    s[n / 2] = -inf;
    s[1] = std::numeric_limits<float>::max();
    s[2] = -std::numeric_limits<float>::signaling_NaN();
    CHECK(count_nonfinite_cpu(t) == 4);
    s[n / 2] = 1e30f;
    CHECK(count_nonfinite_cpu(t) == 3);
  }
}
