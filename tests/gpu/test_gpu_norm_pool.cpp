// batchnorm2d and pooling: the CUDA halves against the CPU halves (fp32).
// Inputs are seeded random normals (never zeros); every output starts as NaN (gputest::poisoned) so
// an element an op forgets to write fails the check; parameter gradients start as random values, so
// overwrite (beta 0) vs accumulate (beta 1) is checked both ways. Tolerances are relative to the
// largest reference magnitude (gputest::rel_err) and stated per op.
//  - batch norm: 1e-4 for outputs and gradients (two-pass vs one-pass statistics over M <= 1600
//    values, then a normalisation), 1e-5 for mean, invstd and the running statistics (the unbiased
//    correction M/(M-1) changes running_var by ~6e-4 relative at these sizes, so 1e-5 tells
//    biased from unbiased).
//  - global average pool: 1e-6 (same arithmetic, other summation order).
//  - max pool forward (selection, no arithmetic; NaN propagates): bitwise equal. Backward is bitwise
//    when windows do not overlap; with overlap an input can collect up to ceil(k/s)^2 gradients,
//    summed in another order: 1e-6.
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "src/ops/batchnorm2d.hpp"
#include "src/ops/pool.hpp"
#include "tests/gpu/gpu_test_util.hpp"

using namespace ht;
using namespace ht::gputest;

namespace {

/// Max pool forward and backward of host `x` [n,c,h,w] and `dy` [n,c,p,q] on both devices: the CPU
/// results (host) and the GPU results (device, outputs start poisoned).
struct MaxpoolRun {
  Tensor y_ref, dx_ref, yg, dxg;
};

MaxpoolRun maxpool_both(const PoolShape& sh, const Tensor& x, const Tensor& dy) {
  OpCachePtr cc, gc;
  MaxpoolRun r{Tensor::empty({sh.n, sh.c, sh.p(), sh.q()}), Tensor::empty(x.shape()), {}, {}};
  maxpool2d_forward_cpu(cc, sh, x, r.y_ref);
  maxpool2d_backward_cpu(cc, sh, x, r.y_ref, dy, r.dx_ref);
  Tensor xg = gpu(x);
  r.yg = poisoned(r.y_ref.shape());
  r.dxg = poisoned(x.shape());
  maxpool2d_forward(gc, sh, xg, r.yg);
  maxpool2d_backward(gc, sh, xg, r.yg, gpu(dy), r.dxg);
  return r;
}

}  // namespace

TEST_CASE("batchnorm2d on the GPU matches the CPU, PyTorch running statistics", "[gpu_ops][batchnorm]") {
  for (BatchNormShape sh : {BatchNormShape{4, 5, 6, 7, 1e-5f, 0.1f}, BatchNormShape{16, 32, 10, 10, 1e-3f, 0.3f}}) {
    INFO("bn " << sh.n << "x" << sh.c << "x" << sh.h << "x" << sh.w << " eps " << sh.eps << " momentum "
               << sh.momentum);
    const std::vector<int64_t> xs{sh.n, sh.c, sh.h, sh.w};
    const int64_t c = sh.c;
    const Tensor x = randn(xs, 1, 0.5f, 2.f);
    OpCachePtr cc, gc;
    auto [gamma, beta, rm, rv, y_ref, sm_ref, si_ref, rm_ref, rv_ref] = batchnorm_train_reference(cc, sh, x);
    Tensor xg = gpu(x), gg = gpu(gamma), bg = gpu(beta), rmg = gpu(rm), rvg = gpu(rv);
    Tensor yg = poisoned(xs), smg = poisoned({c}), sig = poisoned({c});
    batchnorm2d_forward_train(gc, sh, xg, gg, bg, yg, rmg, rvg, smg, sig);
    CHECK(rel_err(yg, y_ref) < 1e-4);
    CHECK(rel_err(smg, sm_ref) < 1e-5);
    CHECK(rel_err(sig, si_ref) < 1e-5);  // 1/sqrt(var+eps) (cuDNN's "invVariance")
    CHECK(rel_err(rmg, rm_ref) < 1e-5);
    CHECK(rel_err(rvg, rv_ref) < 1e-5);  // unbiased variance in the running average, as PyTorch

    Tensor yi_ref = Tensor::empty(xs);
    batchnorm2d_forward_infer_cpu(cc, sh, x, gamma, beta, rm_ref, rv_ref, yi_ref);
    Tensor yig = poisoned(xs);
    batchnorm2d_forward_infer(gc, sh, xg, gg, bg, rmg, rvg, yig);
    CHECK(rel_err(yig, yi_ref) < 1e-4);

    for (bool acc : {false, true}) {
      INFO("accumulate " << acc);
      Tensor dy = randn(xs, 6), dg0 = randn({c}, 7), db0 = randn({c}, 8);
      Tensor dx_ref = Tensor::empty(xs), dg_ref = Tensor::empty({c}), db_ref = Tensor::empty({c});
      dg_ref.copy_from(dg0);
      db_ref.copy_from(db0);
      batchnorm2d_backward_cpu(cc, sh, x, dy, gamma, sm_ref, si_ref, dx_ref, dg_ref, db_ref, acc);
      Tensor dxg = poisoned(xs), dgg = gpu(dg0), dbg = gpu(db0);
      batchnorm2d_backward(gc, sh, xg, gpu(dy), gg, smg, sig, dxg, dgg, dbg, acc);
      CHECK(rel_err(dxg, dx_ref) < 1e-4);
      CHECK(rel_err(dgg, dg_ref) < 1e-4);
      CHECK(rel_err(dbg, db_ref) < 1e-4);
    }
  }
}

TEST_CASE("maxpool2d on the GPU equals the CPU, padding acting as -inf", "[gpu_ops][pool]") {
  for (PoolShape sh : {PoolShape{2, 3, 9, 9, 3, 2, 1}, PoolShape{2, 3, 8, 8, 2, 2, 0}, PoolShape{2, 3, 7, 9, 2, 2, 0},
                       PoolShape{2, 4, 6, 5, 3, 1, 1}}) {
    INFO("input " << sh.h << "x" << sh.w << " kernel " << sh.kernel << " stride " << sh.stride << " pad " << sh.pad);
    // All inputs negative: a padded zero would win every border window if padding were not -inf.
    Tensor x = randn({sh.n, sh.c, sh.h, sh.w}, 11, -3.f, 0.5f);
    Tensor dy = randn({sh.n, sh.c, sh.p(), sh.q()}, 12);
    const MaxpoolRun r = maxpool_both(sh, x, dy);
    CHECK(bit_equal(r.yg, r.y_ref));
    // Inputs no window reads (7x9 with 2x2/2: the last row and column) get a zero gradient, not garbage.
    if (sh.stride >= sh.kernel) CHECK(bit_equal(r.dxg, r.dx_ref));
    else CHECK(rel_err(r.dxg, r.dx_ref) < 1e-6);
  }
}

TEST_CASE("maxpool2d on the GPU propagates NaN as PyTorch and the CPU", "[gpu_ops][pool]") {
  // cuDNN with CUDNN_PROPAGATE_NAN: a window holding a NaN gives NaN (PyTorch: `v > max || isnan(v)`).
  // Non-overlapping windows (2x2/2), so each dy lands on one input: PyTorch and the CPU route a NaN
  // window's gradient to its last NaN; finite windows must equal the CPU bitwise.
  const PoolShape sh{2, 3, 8, 8, 2, 2, 0};
  Tensor x = randn({sh.n, sh.c, sh.h, sh.w}, 13);
  auto xv = x.span<float>();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (size_t i : {size_t{0}, size_t{9}, size_t{64 + 18}, size_t{64 + 27}, size_t{5 * 64 + 63}}) xv[i] = nan;
  Tensor dy = randn({sh.n, sh.c, sh.p(), sh.q()}, 14);
  const MaxpoolRun run = maxpool_both(sh, x, dy);
  const Tensor& y_ref = run.y_ref;
  Tensor y = host(run.yg);
  int nan_windows = 0;
  for (size_t i = 0; i < static_cast<size_t>(y.numel()); ++i) {
    const float r = y_ref.span<float>()[i], g = y.span<float>()[i];
    INFO("output " << i << ": cpu " << r << " gpu " << g);
    CHECK(std::isnan(g) == std::isnan(r));
    if (!std::isnan(r)) CHECK(std::memcmp(&g, &r, sizeof(float)) == 0);
    nan_windows += std::isnan(r) ? 1 : 0;
  }
  CHECK(nan_windows == 4);  // 0 and 9 share a window
  CHECK(bit_equal(run.dxg, run.dx_ref));  // includes where each NaN window's gradient went
}

TEST_CASE("global average pool on the GPU matches the CPU (rel 1e-6)", "[gpu_ops][pool]") {
  for (std::vector<int64_t> xs : {std::vector<int64_t>{3, 5, 4, 4}, std::vector<int64_t>{5, 7, 7, 7}}) {
    Tensor x = randn(xs, 1), dy = randn({xs[0], xs[1]}, 2);
    OpCachePtr cc, gc;
    Tensor y_ref = Tensor::empty({xs[0], xs[1]}), dx_ref = Tensor::empty(xs);
    global_avgpool_forward_cpu(cc, x, y_ref);
    global_avgpool_backward_cpu(cc, dy, dx_ref);
    Tensor yg = poisoned({xs[0], xs[1]}), dxg = poisoned(xs);
    global_avgpool_forward(gc, gpu(x), yg);
    global_avgpool_backward(gc, gpu(dy), dxg);
    CHECK(rel_err(yg, y_ref) < 1e-6);
    CHECK(rel_err(dxg, dx_ref) < 1e-6);
  }
}
