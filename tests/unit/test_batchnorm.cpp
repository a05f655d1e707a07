// BatchNorm2d: the double-precision reference against central finite differences, the oneDNN CPU
// implementation against the reference (forward, batch and running statistics after two updates,
// inference, backward, accumulate) and against values computed by PyTorch 1.13.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "src/ops/batchnorm2d.hpp"
#include "src/ops/batchnorm2d_ref.hpp"
#include "tests/unit/gradcheck.hpp"
#include "tests/unit/tensor_test_util.hpp"

using namespace ht;
using namespace ht::test;

namespace {

/// Everything one training forward + backward of the CPU implementation produces.
struct CpuBn {
  Tensor y, rm, rv, mean, invstd, dx, dgamma, dbeta;
};

/// The outputs of one step, unfilled ([n,c,h,w] and [c]), with running statistics rm0, rv0 (length c).
CpuBn empty_step(const BatchNormShape& sh, const std::vector<double>& rm0, const std::vector<double>& rv0) {
  const std::vector<int64_t> xs{sh.n, sh.c, sh.h, sh.w}, cs{sh.c};
  CpuBn r;
  r.y = Tensor::empty(xs);
  r.rm = to_tensor(rm0, cs);
  r.rv = to_tensor(rv0, cs);
  r.mean = Tensor::empty(cs);
  r.invstd = Tensor::empty(cs);
  r.dx = Tensor::empty(xs);
  r.dgamma = Tensor::empty(cs);
  r.dbeta = Tensor::empty(cs);
  return r;
}

/// One training step from running statistics 0 and 1.
CpuBn cpu_train_step(OpCachePtr& cache, const BatchNormShape& sh, const std::vector<double>& x,
                     const std::vector<double>& gamma, const std::vector<double>& beta,
                     const std::vector<double>& dy) {
  const std::vector<int64_t> xs{sh.n, sh.c, sh.h, sh.w}, cs{sh.c};
  CpuBn r = empty_step(sh, std::vector<double>(sh.c, 0.0), std::vector<double>(sh.c, 1.0));
  auto xt = to_tensor(x, xs), gt = to_tensor(gamma, cs), bt = to_tensor(beta, cs), dyt = to_tensor(dy, xs);
  batchnorm2d_forward_train_cpu(cache, sh, xt, gt, bt, r.y, r.rm, r.rv, r.mean, r.invstd);
  batchnorm2d_backward_cpu(cache, sh, xt, dyt, gt, r.mean, r.invstd, r.dx, r.dgamma, r.dbeta, false);
  return r;
}

/// The CPU implementation's outputs after two training updates (x1, then x2, from running statistics
/// rm0, rv0), backward on the second batch, and inference on x1 with the updated statistics.
struct CpuBnTwoUpdates : CpuBn {
  Tensor y_infer;
};

CpuBnTwoUpdates cpu_two_updates(OpCachePtr& cache, const BatchNormShape& sh, const std::vector<double>& x1,
                                const std::vector<double>& x2, const std::vector<double>& gamma,
                                const std::vector<double>& beta, const std::vector<double>& dy,
                                const std::vector<double>& rm0, const std::vector<double>& rv0) {
  const std::vector<int64_t> xs{sh.n, sh.c, sh.h, sh.w}, cs{sh.c};
  auto tx1 = to_tensor(x1, xs), tx2 = to_tensor(x2, xs), tg = to_tensor(gamma, cs), tb = to_tensor(beta, cs);
  auto tdy = to_tensor(dy, xs);
  CpuBnTwoUpdates r{empty_step(sh, rm0, rv0), Tensor::empty(xs)};
  batchnorm2d_forward_train_cpu(cache, sh, tx1, tg, tb, r.y, r.rm, r.rv, r.mean, r.invstd);
  batchnorm2d_forward_train_cpu(cache, sh, tx2, tg, tb, r.y, r.rm, r.rv, r.mean, r.invstd);
  batchnorm2d_backward_cpu(cache, sh, tx2, tdy, tg, r.mean, r.invstd, r.dx, r.dgamma, r.dbeta, false);
  batchnorm2d_forward_infer_cpu(cache, sh, tx1, tg, tb, r.rm, r.rv, r.y_infer);
  return r;
}

/// What cpu_two_updates should give; mean and invstd are not checked when empty (PyTorch does not expose
/// them).
struct BnWant {
  std::vector<double> y, mean, invstd, running_mean, running_var, y_infer, dx, dgamma, dbeta;
};

/// Float32 tolerances (values O(1)): 1e-6 for the statistics, 1e-5 for outputs, invstd and dx,
/// param_grad_tol for dgamma and dbeta (sums over every element of a channel).
void check_two_updates(const CpuBnTwoUpdates& got, const BnWant& want, double param_grad_tol) {
  check_close({{"y", got.y, want.y, 1e-5},
               {"running_mean", got.rm, want.running_mean, 1e-6},
               {"running_var", got.rv, want.running_var, 1e-6},
               {"y inference", got.y_infer, want.y_infer, 1e-5},
               {"dx", got.dx, want.dx, 1e-5},
               {"dgamma", got.dgamma, want.dgamma, param_grad_tol},
               {"dbeta", got.dbeta, want.dbeta, param_grad_tol}});
  if (!want.mean.empty()) check_close({{"mean", got.mean, want.mean, 1e-6}, {"invstd", got.invstd, want.invstd, 1e-5}});
}

}  // namespace

TEST_CASE("batchnorm2d backward matches finite differences (training mode)", "[batchnorm][gradcheck]") {
  // Several shapes, H != W, one with a single spatial element, one with a single channel.
  const std::vector<BatchNormShape> shapes{{2, 3, 4, 5}, {3, 2, 3, 2}, {5, 4, 1, 1}, {2, 1, 2, 7}};
  uint32_t seed = 100;
  for (const auto& sh : shapes) {
    CAPTURE(sh.n, sh.c, sh.h, sh.w);
    const size_t nx = static_cast<size_t>(sh.n) * sh.c * sh.h * sh.w, nc = static_cast<size_t>(sh.c);
    const auto x = round_to_float(random_vec(nx, ++seed, -2, 3));
    const auto gamma = round_to_float(random_vec(nc, ++seed, 0.5, 1.5));
    const auto beta = round_to_float(random_vec(nc, ++seed, -0.5, 0.5));
    const auto g = round_to_float(random_vec(nx, ++seed));  // dy

    // f = sum g * y(x, gamma, beta), y from the double reference.
    auto f = [&](const std::vector<double>& xv, const std::vector<double>& gv, const std::vector<double>& bv) {
      std::vector<double> y(nx), rm(nc, 0.0), rv(nc, 1.0), m(nc), is(nc);
      ref::batchnorm2d_forward_train(sh, xv.data(), gv.data(), bv.data(), y.data(), rm.data(), rv.data(), m.data(),
                                     is.data());
      return ht::test::dot(g, y);
    };
    const auto num_dx = numeric_grad([&](const std::vector<double>& v) { return f(v, gamma, beta); }, x);
    const auto num_dg = numeric_grad([&](const std::vector<double>& v) { return f(x, v, beta); }, gamma);
    const auto num_db = numeric_grad([&](const std::vector<double>& v) { return f(x, gamma, v); }, beta);

    // The double reference backward: to FD accuracy.
    std::vector<double> y(nx), rm(nc, 0.0), rv(nc, 1.0), m(nc), is(nc), dx(nx), dg(nc), db(nc);
    ref::batchnorm2d_forward_train(sh, x.data(), gamma.data(), beta.data(), y.data(), rm.data(), rv.data(), m.data(),
                                   is.data());
    ref::batchnorm2d_backward(sh, x.data(), g.data(), gamma.data(), m.data(), is.data(), dx.data(), dg.data(),
                              db.data());
    CHECK(max_rel_err(dx, num_dx) < 1e-7);
    CHECK(max_rel_err(dg, num_dg) < 1e-7);
    CHECK(max_rel_err(db, num_db) < 1e-7);

    // The oneDNN (float32) backward: to float accuracy.
    OpCachePtr cache;
    auto r = cpu_train_step(cache, sh, x, gamma, beta, g);
    CHECK(max_rel_err(to_vec(r.dx), num_dx) < 2e-4);
    CHECK(max_rel_err(to_vec(r.dgamma), num_dg) < 2e-4);
    CHECK(max_rel_err(to_vec(r.dbeta), num_db) < 2e-4);
  }
}

TEST_CASE("batchnorm2d oneDNN matches the reference: forward, statistics, inference, backward", "[batchnorm]") {
  // One cache across two shapes and back: the primitives must be rebuilt each time.
  OpCachePtr cache;
  const std::vector<BatchNormShape> shapes{{8, 16, 7, 5}, {4, 3, 6, 6}, {8, 16, 7, 5}};
  uint32_t seed = 200;
  for (auto sh : shapes) {
    sh.momentum = 0.25f;
    sh.eps = 1e-3f;
    CAPTURE(sh.n, sh.c, sh.h, sh.w);
    const size_t nx = static_cast<size_t>(sh.n) * sh.c * sh.h * sh.w, nc = static_cast<size_t>(sh.c);
    const auto x1 = round_to_float(random_vec(nx, ++seed, -1, 4));
    const auto x2 = round_to_float(random_vec(nx, ++seed, -3, 1));
    const auto gamma = round_to_float(random_vec(nc, ++seed, 0.5, 2));
    const auto beta = round_to_float(random_vec(nc, ++seed, -1, 1));
    const auto dy = round_to_float(random_vec(nx, ++seed));
    const auto rv0 = round_to_float(random_vec(nc, ++seed, 0.5, 2));
    const auto rm0 = round_to_float(random_vec(nc, ++seed, -1, 1));

    // Reference: two training updates of the running statistics, then backward on the second batch.
    BnWant w;
    w.y.resize(nx), w.mean.resize(nc), w.invstd.resize(nc), w.dx.resize(nx), w.dgamma.resize(nc), w.dbeta.resize(nc);
    w.y_infer.resize(nx), w.running_mean = rm0, w.running_var = rv0;
    for (const auto* x : {&x1, &x2})
      ref::batchnorm2d_forward_train(sh, x->data(), gamma.data(), beta.data(), w.y.data(), w.running_mean.data(),
                                     w.running_var.data(), w.mean.data(), w.invstd.data());
    ref::batchnorm2d_backward(sh, x2.data(), dy.data(), gamma.data(), w.mean.data(), w.invstd.data(), w.dx.data(),
                              w.dgamma.data(), w.dbeta.data());
    ref::batchnorm2d_forward_infer(sh, x1.data(), gamma.data(), beta.data(), w.running_mean.data(),
                                   w.running_var.data(), w.y_infer.data());

    // Sums run over up to 280 elements per channel.
    check_two_updates(cpu_two_updates(cache, sh, x1, x2, gamma, beta, dy, rm0, rv0), w, 1e-4);
  }
}

TEST_CASE("batchnorm2d backward with accumulate adds exactly and still overwrites dx", "[batchnorm]") {
  const BatchNormShape sh{4, 5, 3, 6};
  const size_t nx = static_cast<size_t>(sh.n) * sh.c * sh.h * sh.w, nc = static_cast<size_t>(sh.c);
  const std::vector<int64_t> xs{sh.n, sh.c, sh.h, sh.w}, cs{sh.c};
  OpCachePtr cache;
  auto r = cpu_train_step(cache, sh, random_vec(nx, 1), random_vec(nc, 2, 0.5, 1.5), random_vec(nc, 3),
                          random_vec(nx, 4));
  auto xt = to_tensor(round_to_float(random_vec(nx, 1)), xs), dyt = to_tensor(random_vec(nx, 4), xs);
  auto gt = to_tensor(random_vec(nc, 2, 0.5, 1.5), cs);
  const auto prev_g = random_vec(nc, 5), prev_b = random_vec(nc, 6);
  auto dg = to_tensor(prev_g, cs), db = to_tensor(prev_b, cs);
  auto dx = to_tensor(random_vec(nx, 7), xs);  // garbage that must be overwritten
  batchnorm2d_backward_cpu(cache, sh, xt, dyt, gt, r.mean, r.invstd, dx, dg, db, true);
  const auto g1 = r.dgamma.span<float>(), b1 = r.dbeta.span<float>();
  for (size_t c = 0; c < nc; ++c) {
    CHECK(dg.span<float>()[c] == static_cast<float>(prev_g[c]) + g1[c]);
    CHECK(db.span<float>()[c] == static_cast<float>(prev_b[c]) + b1[c]);
  }
  CHECK(to_vec(dx) == to_vec(r.dx));
}

TEST_CASE("batchnorm2d rejects one value per channel in training", "[batchnorm]") {
  const BatchNormShape sh{1, 2, 1, 1};
  OpCachePtr cache;
  auto x = Tensor::zeros({1, 2, 1, 1}), y = Tensor::zeros({1, 2, 1, 1}), c1 = Tensor::zeros({2}), c2 = Tensor::zeros({2});
  auto c3 = Tensor::zeros({2}), c4 = Tensor::zeros({2}), c5 = Tensor::zeros({2}), c6 = Tensor::zeros({2});
  CHECK_THROWS_AS(batchnorm2d_forward_train(cache, sh, x, c1, c2, y, c3, c4, c5, c6), RuntimeError);
  auto bad = Tensor::zeros({3});
  const BatchNormShape sh2{2, 2, 1, 1};
  auto x2 = Tensor::zeros({2, 2, 1, 1}), y2 = Tensor::zeros({2, 2, 1, 1});
  CHECK_THROWS_AS(batchnorm2d_forward_train(cache, sh2, x2, bad, c2, y2, c3, c4, c5, c6), RuntimeError);
}

// Fixture computed with PyTorch 1.13 (float64) by:
//   N,C,H,W = 2,2,2,3; x1[i] = 2*sin(0.7i+0.3)+0.5; x2[i] = 1.5*cos(0.45i-0.2)-0.25; dy[i] = sin(1.3i)
//   bn = nn.BatchNorm2d(2, eps=1e-5, momentum=0.1); weight = [1.5, -0.5]; bias = [0.1, 0.2]; bn.train()
//   bn(x1); y2 = bn(x2); y2.backward(dy)        -> y2, x2.grad, weight.grad, bias.grad, running stats
//   bn.eval(); yinf = bn(x1)
TEST_CASE("batchnorm2d matches PyTorch BatchNorm2d", "[batchnorm][torch]") {
  const std::vector<double> y2{1.46808879119,  1.42961229269,  0.725667684325,  -0.503585582805, -2.01339605933,
                               -3.50315172959, 0.407508306662, 0.669980313792,  0.648314850054,  0.346825634837,
                               -0.174459081891, -0.811748492031, -0.296513477388, 0.86814884141,  1.47913367734,
                               1.41479040874,  0.687930153266, -0.556724999841, -0.690215735825, -0.0652474819611,
                               0.421971416031, 0.674432851985, 0.641870290913,  0.330767127435};
  const std::vector<double> dx{-0.36532608313, 1.86016473628,  1.00567924115,   -1.45428536825, -1.52703395912,
                               1.37159827066,  -0.967830730854, -0.309533486547, 0.801977386248, 0.738352621281,
                               -0.406964036373, -0.955677590202, 0.323412968283,  -2.35210134935, -1.7590084325,
                               1.04054058246,  1.96555309283,  -0.109193699314, 0.956970673663, 0.406565089142,
                               -0.739143982592, -0.802067114468, 0.309782855219,  0.967568315482};
  const std::vector<double> dgamma{1.95585947195, 0.00378486997428}, dbeta{0.122454055954, -5.44598463863e-05};
  const std::vector<double> rm{0.108748083906, -0.0471089019503}, rv{1.02981471939, 1.03386951694};
  const std::vector<double> yinf{1.55194563577,  3.16590682826,  3.60991573097,  2.67514801914,   0.801239553784,
                                 -1.13048123321, 0.892345194496, 0.799823965312, 0.298664777705,  -0.375429371565,
                                 -0.905421471086, -1.0420479551,  2.63821291069,  0.751559250354,  -1.16954130865,
                                 -2.22156515538, -1.90972903641, -0.380694351059, -0.391099214806, -0.914002515262,
                                 -1.03950440105, -0.708579374263, -0.0768666458446, 0.558529417246};
  const BatchNormShape sh{2, 2, 2, 3};
  std::vector<double> x1(24), x2(24), dy(24);
  for (int i = 0; i < 24; ++i) {
    x1[i] = 2 * std::sin(0.7 * i + 0.3) + 0.5;
    x2[i] = 1.5 * std::cos(0.45 * i - 0.2) - 0.25;
    dy[i] = std::sin(1.3 * i);
  }
  OpCachePtr cache;
  BnWant w;
  w.y = y2, w.dx = dx, w.dgamma = dgamma, w.dbeta = dbeta, w.running_mean = rm, w.running_var = rv, w.y_infer = yinf;
  check_two_updates(cpu_two_updates(cache, sh, x1, x2, {1.5, -0.5}, {0.1, 0.2}, dy, {0, 0}, {1, 1}), w, 1e-5);
}
