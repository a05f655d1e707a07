// The CPU ops in bfloat16 (NHWC activations, float32 master weights and gradients) against the
// double references of src/ops/*_ref.hpp, within bounds derived from the format:
//  - bf16 keeps 8 significand bits, so rounding an input to nearest costs a relative u = 2^-8 and a
//    product of two rounded inputs at most 2u + u^2 = 2^-7 + 2^-16; summed over the taps of an output
//    this is at most 2^-7 * B (+), where B = the same op run on |x| and |w| (the sum of |terms|,
//    computed by the double reference); float32 accumulation adds taps * 2^-24 * B; an output stored
//    in bf16 is rounded once more (2^-8 |y|). Tolerance = 1.01 * (2^-7 B + 2^-8 |y|) + taps 2^-24 B.
//  - ops whose inputs are already bf16 values and whose math is float32 (batch norm, pools,
//    element-wise) are compared on the rounded inputs: only the output rounding (2^-8 |y|) and float32
//    arithmetic remain; max, relu and the routing of max-pool gradients are exact.
// Each weighted op also shows bf16-sized errors somewhere (> 2^-12 B), so it did not run in float32.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "base/bf16.hpp"
#include "src/ops/batchnorm2d.hpp"
#include "src/ops/batchnorm2d_ref.hpp"
#include "src/ops/conv2d.hpp"
#include "src/ops/conv2d_ref.hpp"
#include "src/ops/convert.hpp"
#include "src/ops/elementwise.hpp"
#include "src/ops/linear.hpp"
#include "src/ops/linear_ref.hpp"
#include "src/ops/pool.hpp"
#include "src/ops/pool_ref.hpp"
#include "tests/unit/tensor_test_util.hpp"

using namespace ht;
using namespace ht::test;

namespace {

/// v (NCHW order for 4-D shapes) as a bf16 tensor in the ops' format (NHWC for 4-D).
Tensor bf16_tensor(const std::vector<double>& v, const std::vector<int64_t>& shape) {
  Tensor f = to_tensor(v, shape), b = Tensor::empty(shape, DType::bf16);
  convert_tensor(f, b);
  return b;
}
/// A bf16 (or f32) tensor's values in NCHW order.
std::vector<double> values(const Tensor& t) {
  if (t.dtype() == DType::f32) return to_vec(t);
  Tensor f = Tensor::empty(t.shape(), DType::f32);
  convert_tensor(t, f);
  return to_vec(f);
}
/// v rounded to bf16 (the values a bf16 tensor of v holds).
std::vector<double> round_bf16(std::vector<double> v) {
  for (auto& x : v) x = to_f32(to_bf16(static_cast<float>(x)));
  return v;
}
std::vector<double> abs_of(std::vector<double> v) {
  for (auto& x : v) x = std::fabs(x);
  return v;
}

/// Checks got against want element by element within the format bound (header comment): bound[i]
/// is B (the sum of |terms|), lp_out whether the output is stored in bf16. Returns the largest
/// |got - want| / B seen, to show bf16 rounding happened.
double check_bound(const char* what, const std::vector<double>& got, const std::vector<double>& want,
                   const std::vector<double>& bound, int taps, bool lp_out) {
  INFO(what);
  REQUIRE(got.size() == want.size());
  double worst = 0;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double b = bound[i], err = std::fabs(got[i] - want[i]);
    const double tol = 1.01 * (0x1p-7 * b + (lp_out ? 0x1p-8 * std::fabs(want[i]) : 0.0)) + taps * 0x1p-24 * b + 1e-30;
    if (err > tol && bad++ < 5) UNSCOPED_INFO("element " << i << ": got " << got[i] << " want " << want[i] << " tol " << tol);
    if (b > 0) worst = std::max(worst, err / b);
  }
  CHECK(bad == 0);
  return worst;
}

Conv2dShape conv_shape(int n, int c, int h, int w, int k, int r, int stride, int pad) {
  Conv2dShape sh;
  sh.n = n, sh.c = c, sh.h = h, sh.w = w, sh.k = k, sh.r = r, sh.s = r, sh.stride = stride, sh.pad = pad;
  return sh;
}

}  // namespace

TEST_CASE("conv2d in bf16 (NHWC) is within the bf16 bound of the double reference", "[ops][bf16][conv2d]") {
  struct Case {
    const char* name;
    Conv2dShape sh;
    bool bias;
  };
  const Case cases[] = {{"3x3 s1 p1 16->32 bias", conv_shape(2, 16, 6, 5, 32, 3, 1, 1), true},
                        {"3x3 s2 p1 16->16", conv_shape(2, 16, 7, 6, 16, 3, 2, 1), false},
                        {"1x1 s2 32->16 (shortcut)", conv_shape(2, 32, 6, 6, 16, 1, 2, 0), false},
                        {"3x3 stem 3->16", conv_shape(2, 3, 8, 8, 16, 3, 1, 1), false}};
  for (const auto& c : cases) {
    SECTION(c.name) {
      const auto& sh = c.sh;
      const size_t nx = size_t(sh.n) * sh.c * sh.h * sh.w, nw = size_t(sh.k) * sh.c * sh.r * sh.s,
                   ny = size_t(sh.n) * sh.k * sh.p() * sh.q();
      const auto x = round_to_float(random_vec(nx, 1)), w = round_to_float(random_vec(nw, 2)),
                 b = round_to_float(random_vec(size_t(sh.k), 3)), dy = round_bf16(random_vec(ny, 4));
      const int taps = sh.c * sh.r * sh.s;
      std::vector<double> y(ny), yb(ny), dx(nx), dw(nw), db(size_t(sh.k)), dxb(nx), dwb(nw), dbb(size_t(sh.k));
      const auto ax = abs_of(x), aw = abs_of(w), ady = abs_of(dy);
      ref::conv2d_forward(sh, x.data(), w.data(), c.bias ? b.data() : nullptr, y.data());
      ref::conv2d_forward<double>(sh, ax.data(), aw.data(), nullptr, yb.data());
      ref::conv2d_backward(sh, x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data());
      std::vector<double> junk_dw(nw), junk_db(size_t(sh.k)), junk_dx(nx);
      ref::conv2d_backward(sh, ax.data(), aw.data(), ady.data(), dxb.data(), junk_dw.data(), dbb.data());
      ref::conv2d_backward(sh, ax.data(), aw.data(), ady.data(), junk_dx.data(), dwb.data(), junk_db.data());

      const std::vector<int64_t> xs{sh.n, sh.c, sh.h, sh.w}, ys{sh.n, sh.k, sh.p(), sh.q()};
      Tensor xt = bf16_tensor(x, xs), wt = to_tensor(w, {sh.k, sh.c, sh.r, sh.s}), bt = to_tensor(b, {sh.k});
      Tensor yt = Tensor::empty(ys, DType::bf16), dyt = bf16_tensor(dy, ys), dxt = Tensor::empty(xs, DType::bf16);
      Tensor dwt = Tensor::empty({sh.k, sh.c, sh.r, sh.s}), dbt = Tensor::empty({sh.k});
      OpCachePtr cache;
      conv2d_forward(cache, sh, xt, wt, c.bias ? &bt : nullptr, yt);
      conv2d_backward(cache, sh, xt, wt, dyt, &dxt, dwt, &dbt, false);
      CHECK(check_bound("y", values(yt), y, yb, taps, true) > 0x1p-12);
      check_bound("dx", values(dxt), dx, dxb, taps, true);
      check_bound("dw", to_vec(dwt), dw, dwb, sh.n * sh.p() * sh.q(), false);
      check_bound("db", to_vec(dbt), db, dbb, sh.n * sh.p() * sh.q(), false);
      // Accumulation adds in float32 to the float32 gradient.
      Tensor dw2 = Tensor::empty({sh.k, sh.c, sh.r, sh.s});
      dw2.copy_from(dwt);
      conv2d_backward(cache, sh, xt, wt, dyt, nullptr, dw2, nullptr, true);
      auto two = to_vec(dwt);
      for (auto& v : two) v *= 2;
      CHECK(max_rel_err(to_vec(dw2), two) < 1e-6);
    }
  }
}

TEST_CASE("linear in bf16 is within the bf16 bound, with float32 or bf16 outputs", "[ops][bf16][linear]") {
  const LinearShape sh{8, 40, 12};
  const size_t nx = 8 * 40, nw = 12 * 40, ny = 8 * 12;
  const auto x = round_bf16(random_vec(nx, 5)), w = round_to_float(random_vec(nw, 6)),
             b = round_to_float(random_vec(12, 7)), dy = round_to_float(random_vec(ny, 8));
  std::vector<double> y(ny), yb(ny), dx(nx), dw(nw), db(12), dxb(nx), dwb(nw), dbb(12), j1(nx), j2(nw), j3(12);
  const auto ax = abs_of(x), aw = abs_of(w), ady = abs_of(dy);
  ref::linear_forward(sh, x.data(), w.data(), b.data(), y.data());
  ref::linear_forward<double>(sh, ax.data(), aw.data(), nullptr, yb.data());
  ref::linear_backward(sh, x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data());
  ref::linear_backward(sh, ax.data(), aw.data(), ady.data(), dxb.data(), j2.data(), j3.data());
  ref::linear_backward(sh, ax.data(), aw.data(), ady.data(), j1.data(), dwb.data(), dbb.data());
  for (DType yt_dtype : {DType::f32, DType::bf16}) {
    SECTION(std::string("y ") + dtype_name(yt_dtype)) {
      Tensor xt = bf16_tensor(x, {8, 40}), wt = to_tensor(w, {12, 40}), bt = to_tensor(b, {12});
      Tensor yt = Tensor::empty({8, 12}, yt_dtype), dxt = Tensor::empty({8, 40}, DType::bf16);
      Tensor dyt = yt_dtype == DType::f32 ? to_tensor(dy, {8, 12}) : bf16_tensor(round_bf16(dy), {8, 12});
      Tensor dwt = Tensor::empty({12, 40}), dbt = Tensor::empty({12});
      OpCachePtr cache;
      linear_forward(cache, sh, xt, wt, &bt, yt);
      linear_backward(cache, sh, xt, wt, dyt, &dxt, dwt, &dbt, false);
      const bool lp = yt_dtype == DType::bf16;
      CHECK(check_bound("y", values(yt), y, yb, 40, lp) > 0x1p-12);
      check_bound("dx", values(dxt), dx, dxb, 12, true);
      check_bound("dw", to_vec(dwt), dw, dwb, 8, false);
      check_bound("db", to_vec(dbt), db, dbb, 8, false);
    }
  }
}

TEST_CASE("batch norm in bf16: float32 statistics, outputs rounded once", "[ops][bf16][batchnorm]") {
  BatchNormShape sh;
  sh.n = 4, sh.c = 16, sh.h = 5, sh.w = 3;
  const size_t n = size_t(sh.n) * sh.c * sh.h * sh.w;
  const std::vector<int64_t> s{sh.n, sh.c, sh.h, sh.w};
  auto x = round_bf16(random_vec(n, 9, -2, 3)), dy = round_bf16(random_vec(n, 10));
  const auto g = round_to_float(random_vec(16, 11, 0.5, 1.5)), be = round_to_float(random_vec(16, 12));
  std::vector<double> y(n), rm(16, 0.0), rv(16, 1.0), sm(16), si(16), dx(n), dg(16), db(16);
  ref::batchnorm2d_forward_train(sh, x.data(), g.data(), be.data(), y.data(), rm.data(), rv.data(), sm.data(), si.data());
  ref::batchnorm2d_backward(sh, x.data(), dy.data(), g.data(), sm.data(), si.data(), dx.data(), dg.data(), db.data());

  Tensor xt = bf16_tensor(x, s), yt = Tensor::empty(s, DType::bf16), dyt = bf16_tensor(dy, s), dxt = Tensor::empty(s, DType::bf16);
  Tensor gt = to_tensor(g, {16}), bt = to_tensor(be, {16}), rmt = Tensor::zeros({16}), rvt = to_tensor(std::vector<double>(16, 1.0), {16});
  Tensor smt = Tensor::empty({16}), sit = Tensor::empty({16}), dgt = Tensor::empty({16}), dbt = Tensor::empty({16});
  OpCachePtr cache;
  batchnorm2d_forward_train(cache, sh, xt, gt, bt, yt, rmt, rvt, smt, sit);
  batchnorm2d_backward(cache, sh, xt, dyt, gt, smt, sit, dxt, dgt, dbt, false);
  auto within = [](const char* what, const std::vector<double>& got, const std::vector<double>& want, double rel,
                   double abs_tol) {
    INFO(what);
    int bad = 0;
    for (size_t i = 0; i < got.size(); ++i) bad += std::fabs(got[i] - want[i]) > rel * std::fabs(want[i]) + abs_tol;
    CHECK(bad == 0);
  };
  double ymax = 0, dxmax = 0;
  for (double v : y) ymax = std::max(ymax, std::fabs(v));
  for (double v : dx) dxmax = std::max(dxmax, std::fabs(v));
  // Output rounding 2^-8 |y|, float32 sums over the N*H*W = 60 values per channel: 1e-5 of the
  // largest output.
  within("y", values(yt), y, 0x1p-8, 1e-5 * ymax);
  within("dx", values(dxt), dx, 0x1p-8, 1e-5 * dxmax);
  within("save_mean", to_vec(smt), sm, 1e-6, 1e-6);
  within("save_invstd", to_vec(sit), si, 1e-5, 0);
  within("running_var", to_vec(rvt), rv, 1e-5, 0);
  within("dgamma", to_vec(dgt), dg, 1e-5, 1e-5);
  within("dbeta", to_vec(dbt), db, 1e-5, 1e-5);
}

TEST_CASE("pools, relu and add in bf16: exact where the math is exact, else one rounding", "[ops][bf16][pool]") {
  const std::vector<int64_t> s{2, 16, 6, 4};
  const size_t n = 2 * 16 * 6 * 4;
  const auto x = round_bf16(random_vec(n, 13)), x2 = round_bf16(random_vec(n, 14)), dyp = round_bf16(random_vec(2 * 16 * 3 * 2, 15));
  Tensor xt = bf16_tensor(x, s), x2t = bf16_tensor(x2, s);
  // max pool 2x2 s2: forward exact, backward routes dy exactly (windows do not overlap)
  PoolShape ps;
  ps.n = 2, ps.c = 16, ps.h = 6, ps.w = 4, ps.kernel = 2, ps.stride = 2, ps.pad = 0;
  std::vector<double> y(2 * 16 * 3 * 2), dx(n);
  ref::maxpool2d_forward(x.data(), ps, y.data());
  ref::maxpool2d_backward(x.data(), dyp.data(), ps, dx.data());
  Tensor yt = Tensor::empty({2, 16, 3, 2}, DType::bf16), dyt = bf16_tensor(dyp, {2, 16, 3, 2}), dxt = Tensor::empty(s, DType::bf16);
  OpCachePtr cache;
  maxpool2d_forward(cache, ps, xt, yt);
  maxpool2d_backward(cache, ps, xt, yt, dyt, dxt);
  CHECK(values(yt) == y);
  CHECK(values(dxt) == dx);
  // global average pool: one rounding of the float32 mean
  std::vector<double> g(32), gd(n);
  ref::global_avgpool_forward(x.data(), 2, 16, 6, 4, g.data());
  Tensor gt = Tensor::empty({2, 16}, DType::bf16);
  global_avgpool_forward(cache, xt, gt);
  const auto gv = values(gt);
  for (size_t i = 0; i < g.size(); ++i) CHECK(std::fabs(gv[i] - g[i]) <= 0x1p-8 * std::fabs(g[i]) + 1e-6);
  const auto gdy = round_bf16(random_vec(32, 16));
  ref::global_avgpool_backward(gdy.data(), 2, 16, 6, 4, gd.data());
  Tensor gdx = Tensor::empty(s, DType::bf16);
  global_avgpool_backward(cache, bf16_tensor(gdy, {2, 16}), gdx);
  const auto gdv = values(gdx);
  // dy/(H*W) in float (1/24 is inexact: 2^-24), then one bf16 rounding (2^-8)
  for (size_t i = 0; i < gd.size(); ++i) CHECK(std::fabs(gdv[i] - gd[i]) <= (0x1p-8 + 0x1p-22) * std::fabs(gd[i]));
  // relu exact; add = one RNE rounding of the float sum
  Tensor rt = Tensor::empty(s, DType::bf16), at = Tensor::empty(s, DType::bf16);
  relu_forward(xt, rt);
  add_forward(xt, x2t, at);
  const auto rv = values(rt), av = values(at);
  for (size_t i = 0; i < n; ++i) {
    CHECK(rv[i] == std::max(x[i], 0.0));
    CHECK(av[i] == to_f32(to_bf16(static_cast<float>(x[i]) + static_cast<float>(x2[i]))));
  }
}

TEST_CASE("convert_tensor: float32 NCHW <-> bf16 NHWC, and mixed dtypes are refused", "[ops][bf16]") {
  // [1,2,1,3] NCHW 0..5 -> NHWC order 0,3,1,4,2,5
  Tensor f = to_tensor({0, 1, 2, 3, 4, 5}, {1, 2, 1, 3}), b = Tensor::empty({1, 2, 1, 3}, DType::bf16);
  convert_tensor(f, b);
  const bf16* p = b.data<bf16>();
  const float want[] = {0, 3, 1, 4, 2, 5};
  for (int i = 0; i < 6; ++i) CHECK(to_f32(p[i]) == want[i]);
  CHECK(values(b) == to_vec(f));
  // conv2d with a bf16 x but a float32 y: an error naming both
  OpCachePtr cache;
  const auto sh = conv_shape(1, 2, 4, 4, 2, 3, 1, 1);
  Tensor x = Tensor::zeros({1, 2, 4, 4}, DType::bf16), w = Tensor::zeros({2, 2, 3, 3}), y = Tensor::zeros({1, 2, 4, 4});
  CHECK_THROWS_WITH(conv2d_forward(cache, sh, x, w, nullptr, y), Catch::Contains("x is bfloat16 but y is float32"));
  Tensor wb = Tensor::zeros({2, 2, 3, 3}, DType::bf16), yb = Tensor::zeros({1, 2, 4, 4}, DType::bf16);
  CHECK_THROWS_WITH(conv2d_forward(cache, sh, x, wb, nullptr, yb), Catch::Contains("w has dtype bfloat16, expected float32"));
}
