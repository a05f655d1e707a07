// Pooling: max pool (oneDNN) and global average pool (own loops) against central finite
// differences in double and against the naive references, plus hand-computed padding cases.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "src/ops/pool.hpp"
#include "src/ops/pool_ref.hpp"
#include "tests/unit/gradcheck.hpp"
#include "tests/unit/tensor_test_util.hpp"

using namespace ht;
using namespace ht::test;

namespace {

/// n distinct values 0.01*k - 1 (k a random permutation of 0..n-1), exactly representable steps
/// apart by far more than the FD step, so no window has a tie and FD never flips an arg-max.
std::vector<double> distinct_values(size_t n, uint32_t seed) {
  std::vector<double> v(n);
  std::iota(v.begin(), v.end(), 0.0);
  std::shuffle(v.begin(), v.end(), std::mt19937(seed));
  for (auto& x : v) x = static_cast<float>(0.01 * x - 1.0);
  return v;
}

std::vector<int64_t> x_shape(const PoolShape& s) { return {s.n, s.c, s.h, s.w}; }
std::vector<int64_t> y_shape(const PoolShape& s) { return {s.n, s.c, s.p(), s.q()}; }
size_t x_numel(const PoolShape& s) { return static_cast<size_t>(s.n) * s.c * s.h * s.w; }
size_t y_numel(const PoolShape& s) { return static_cast<size_t>(s.n) * s.c * s.p() * s.q(); }

PoolShape pool(int n, int c, int h, int w, int k, int s, int p) {
  PoolShape sh;
  sh.n = n; sh.c = c; sh.h = h; sh.w = w; sh.kernel = k; sh.stride = s; sh.pad = p;
  return sh;
}

}  // namespace

TEST_CASE("maxpool2d backward matches finite differences", "[pool][gradcheck]") {
  // kernel 2 stride 2 (even and odd sizes: the last row/column is dropped), kernel 3 stride 2 pad 1
  // (overlapping windows, padding), H != W.
  const std::vector<PoolShape> shapes{pool(2, 3, 6, 4, 2, 2, 0), pool(1, 2, 7, 5, 2, 2, 0), pool(2, 2, 7, 6, 3, 2, 1),
                                      pool(1, 3, 5, 8, 3, 2, 1)};
  uint32_t seed = 10;
  for (const auto& sh : shapes) {
    CAPTURE(sh.n, sh.c, sh.h, sh.w, sh.kernel, sh.stride, sh.pad);
    const auto x = distinct_values(x_numel(sh), ++seed);
    const auto g = random_vec(y_numel(sh), ++seed);
    const auto num = numeric_grad(
        [&](const std::vector<double>& v) {
          std::vector<double> y(y_numel(sh));
          ref::maxpool2d_forward(v.data(), sh, y.data());
          return ht::test::dot(g, y);
        },
        x, 1e-4);
    std::vector<double> dx(x.size());
    ref::maxpool2d_backward(x.data(), g.data(), sh, dx.data());
    CHECK(max_rel_err(dx, num) < 1e-8);

    OpCachePtr cache;
    auto tx = to_tensor(x, x_shape(sh)), ty = Tensor::empty(y_shape(sh)), tdy = to_tensor(g, y_shape(sh));
    auto tdx = Tensor::empty(x_shape(sh));
    maxpool2d_forward_cpu(cache, sh, tx, ty);
    maxpool2d_backward_cpu(cache, sh, tx, ty, tdy, tdx);
    CHECK(max_rel_err(to_vec(tdx), num) < 1e-6);  // g rounded to float, sums of up to 4 terms
  }
}

TEST_CASE("maxpool2d oneDNN matches the reference", "[pool]") {
  // One cache across shapes (rebuilds), random inputs with ties allowed in forward only.
  OpCachePtr cache;
  const std::vector<PoolShape> shapes{pool(4, 8, 16, 12, 2, 2, 0), pool(3, 5, 15, 17, 3, 2, 1),
                                      pool(2, 4, 9, 9, 3, 3, 0), pool(4, 8, 16, 12, 2, 2, 0)};
  uint32_t seed = 50;
  for (const auto& sh : shapes) {
    CAPTURE(sh.n, sh.c, sh.h, sh.w, sh.kernel, sh.stride, sh.pad);
    const auto x = distinct_values(x_numel(sh), ++seed);
    const auto dy = random_vec(y_numel(sh), ++seed);
    std::vector<double> y(y_numel(sh)), dxr(x_numel(sh));
    const auto dyf = to_vec(to_tensor(dy, y_shape(sh)));
    ref::maxpool2d_forward(x.data(), sh, y.data());
    ref::maxpool2d_backward(x.data(), dyf.data(), sh, dxr.data());

    auto tx = to_tensor(x, x_shape(sh)), ty = Tensor::empty(y_shape(sh)), tdy = to_tensor(dy, y_shape(sh));
    auto tdx = to_tensor(random_vec(x_numel(sh), 1), x_shape(sh));  // garbage to be overwritten
    maxpool2d_forward_cpu(cache, sh, tx, ty);
    maxpool2d_backward_cpu(cache, sh, tx, ty, tdy, tdx);
    CHECK(to_vec(ty) == y);  // a max is exact
    CHECK(max_rel_err(to_vec(tdx), dxr) < 1e-6);

    // Backward through a fresh cache (no forward, so no workspace) recomputes the arg-max.
    OpCachePtr fresh;
    auto tdx2 = Tensor::empty(x_shape(sh));
    maxpool2d_backward_cpu(fresh, sh, tx, ty, tdy, tdx2);
    CHECK(to_vec(tdx2) == to_vec(tdx));
  }
}

TEST_CASE("maxpool2d pads with -inf and takes PyTorch's output size", "[pool]") {
  // x = -(1..9) on a 3x3 plane, kernel 3 stride 2 pad 1 -> 2x2. Zero padding would give 0s;
  // PyTorch MaxPool2d(3, 2, 1) gives [[-1, -2], [-4, -5]].
  const auto sh = pool(1, 1, 3, 3, 3, 2, 1);
  REQUIRE(sh.p() == 2);
  REQUIRE(sh.q() == 2);
  std::vector<double> x(9);
  for (int i = 0; i < 9; ++i) x[i] = -(i + 1);
  OpCachePtr cache;
  auto tx = to_tensor(x, {1, 1, 3, 3}), ty = Tensor::empty({1, 1, 2, 2});
  maxpool2d_forward_cpu(cache, sh, tx, ty);
  CHECK(to_vec(ty) == std::vector<double>{-1, -2, -4, -5});
  // Backward: each dy lands on its window's maximum; x[0] is the max of one window only.
  auto tdy = to_tensor({1, 2, 3, 4}, {1, 1, 2, 2}), tdx = Tensor::empty({1, 1, 3, 3});
  maxpool2d_backward_cpu(cache, sh, tx, ty, tdy, tdx);
  CHECK(to_vec(tdx) == std::vector<double>{1, 2, 0, 3, 4, 0, 0, 0, 0});
  // 5x7 with kernel 2 stride 2: 2x3 output, the last row and column are never read.
  const auto sh2 = pool(1, 1, 5, 7, 2, 2, 0);
  CHECK(sh2.p() == 2);
  CHECK(sh2.q() == 3);
  CHECK_THROWS_AS(maxpool2d_forward(cache, sh2, tx, ty), RuntimeError);  // wrong x shape
}

TEST_CASE("global average pool matches finite differences and the reference", "[pool][gradcheck]") {
  for (auto [n, c, h, w] : std::vector<std::array<int, 4>>{{2, 3, 4, 5}, {3, 2, 1, 1}, {2, 4, 7, 3}}) {
    CAPTURE(n, c, h, w);
    const size_t nx = static_cast<size_t>(n) * c * h * w, ny = static_cast<size_t>(n) * c;
    const auto x = random_vec(nx, 77);
    const auto g = random_vec(ny, 78);
    const auto num = numeric_grad(
        [&](const std::vector<double>& v) {
          std::vector<double> y(ny);
          ref::global_avgpool_forward(v.data(), n, c, h, w, y.data());
          return ht::test::dot(g, y);
        },
        x);
    std::vector<double> dxr(nx), yr(ny);
    ref::global_avgpool_backward(g.data(), n, c, h, w, dxr.data());
    CHECK(max_rel_err(dxr, num) < 1e-8);

    OpCachePtr cache;
    auto tx = to_tensor(x, {n, c, h, w}), ty = Tensor::empty({n, c}), tdy = to_tensor(g, {n, c});
    auto tdx = Tensor::empty({n, c, h, w});
    global_avgpool_forward_cpu(cache, tx, ty);
    global_avgpool_backward_cpu(cache, tdy, tdx);
    ref::global_avgpool_forward(to_vec(tx).data(), n, c, h, w, yr.data());
    CHECK(max_rel_err(to_vec(ty), yr) < 1e-6);
    CHECK(max_rel_err(to_vec(tdx), num) < 1e-6);
  }
}

TEST_CASE("maxpool2d propagates NaN as PyTorch", "[pool][nan]") {
  // PyTorch (CPU and CUDA) takes a value when `v > max || isnan(v)`: a window holding a NaN gives
  // NaN, and its gradient goes to the window's last NaN in row-major order. 4x4, kernel 2 stride 2:
  //   [ 1 NaN | 3  4 ]      y = [[NaN, 8], [NaN, 16]]
  //   [ 5  6  | 7  8 ]
  //   [NaN 10 | 11 12]      window (1,0) holds NaN at 8 and 13: 13 (the last) gets its gradient
  //   [ 14 NaN| 15 16]
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const auto sh = pool(1, 1, 4, 4, 2, 2, 0);
  Tensor tx = Tensor::empty({1, 1, 4, 4});
  auto xv = tx.span<float>();
  for (int i = 0; i < 16; ++i) xv[i] = static_cast<float>(i + 1);
  xv[1] = nan;
  xv[8] = nan;
  xv[13] = nan;
  OpCachePtr cache;
  Tensor ty = Tensor::empty({1, 1, 2, 2});
  maxpool2d_forward_cpu(cache, sh, tx, ty);
  auto yv = ty.span<float>();
  CHECK(std::isnan(yv[0]));
  CHECK(yv[1] == 8.f);
  CHECK(std::isnan(yv[2]));
  CHECK(yv[3] == 16.f);
  Tensor tdy = to_tensor({1, 2, 3, 4}, {1, 1, 2, 2}), tdx = Tensor::empty({1, 1, 4, 4});
  maxpool2d_backward_cpu(cache, sh, tx, ty, tdy, tdx);
  CHECK(to_vec(tdx) == std::vector<double>{0, 1, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 3, 0, 4});
  // The dispatcher, a fresh cache (backward recomputes the arg-max), and the reference agree.
  OpCachePtr fresh;
  Tensor tdx2 = Tensor::empty({1, 1, 4, 4});
  maxpool2d_backward(fresh, sh, tx, ty, tdy, tdx2);
  CHECK(to_vec(tdx2) == to_vec(tdx));
  std::vector<float> yr(4), dxr(16);
  const auto dyv = to_vec(tdy);
  const std::vector<float> dyf(dyv.begin(), dyv.end());
  ref::maxpool2d_forward(xv.data(), sh, yr.data());
  ref::maxpool2d_backward(xv.data(), dyf.data(), sh, dxr.data());
  CHECK((std::isnan(yr[0]) && yr[1] == 8.f && std::isnan(yr[2]) && yr[3] == 16.f));
  CHECK(std::vector<double>(dxr.begin(), dxr.end()) == to_vec(tdx));

  // Overlapping windows with padding, NaN in some planes only, against the reference: the planes
  // without NaN keep oneDNN's result, the others are PyTorch's.
  const auto sh3 = pool(2, 3, 7, 6, 3, 2, 1);
  auto x3 = distinct_values(x_numel(sh3), 99);
  x3[5] = nan;                   // plane 0
  x3[2 * 42 + 20] = nan;         // plane 2: two NaN in overlapping windows
  x3[2 * 42 + 22] = nan;
  std::vector<float> x3f(x3.begin(), x3.end()), y3r(y_numel(sh3)), dx3r(x_numel(sh3));
  const auto dy3 = random_vec(y_numel(sh3), 100);
  Tensor t3 = to_tensor(x3, x_shape(sh3)), y3 = Tensor::empty(y_shape(sh3)), dy3t = to_tensor(dy3, y_shape(sh3));
  Tensor dx3 = Tensor::empty(x_shape(sh3));
  OpCachePtr c3;
  maxpool2d_forward_cpu(c3, sh3, t3, y3);
  maxpool2d_backward_cpu(c3, sh3, t3, y3, dy3t, dx3);
  const auto dy3v = to_vec(dy3t);
  const std::vector<float> dy3f(dy3v.begin(), dy3v.end());
  ref::maxpool2d_forward(x3f.data(), sh3, y3r.data());
  ref::maxpool2d_backward(x3f.data(), dy3f.data(), sh3, dx3r.data());
  const auto yg = y3.span<float>();
  int nans = 0;
  for (size_t i = 0; i < y3r.size(); ++i) {
    CAPTURE(i);
    CHECK(std::isnan(yg[i]) == std::isnan(y3r[i]));
    if (!std::isnan(y3r[i])) CHECK(yg[i] == y3r[i]);
    nans += std::isnan(yg[i]) ? 1 : 0;
  }
  CHECK(nans >= 3);
  CHECK(max_rel_err(to_vec(dx3), std::vector<double>(dx3r.begin(), dx3r.end())) < 1e-6);
}
