// Each op's CUDA implementation against its CPU implementation (fp32, strict FP32 math: no TF32).
// Inputs are seeded random normals (never zeros); every output starts as NaN (gputest::poisoned) so
// an element an op forgets to write fails the check; parameter gradients start as random values, so
// overwrite (beta 0) vs accumulate (beta 1) is checked both ways.
// Tolerances are relative to the largest reference magnitude (gputest::rel_err) and stated per op:
//  - conv2d, linear: 1e-4. Both sides sum up to C*R*S (here <= 576) fp32 products in different
//    orders; the CPU may use Winograd (error up to ~5e-6 of max|y|, results/cpu/conv2d_linear_ops.md),
//    cuDNN may choose FFT/Winograd, whose fp32 error is larger than a direct sum's (~1e-5 seen
//    elsewhere); 1e-4 leaves 10x margin yet still catches any indexing, transposition, stride, padding
//    or beta error (those give O(1) errors). TF32 (inputs rounded to a 10-bit mantissa: ~5e-4
//    relative whatever the sum length) would fail it, so these tests also show strict FP32 is in
//    effect. With TF32 allowed (train.precision = tf32) the bound is 5e-3.
//  - batch norm: 1e-4 for outputs and gradients (two-pass vs one-pass statistics over M <= 1600
//    values, then a normalisation), 1e-5 for mean, invstd and the running statistics (the unbiased
//    correction M/(M-1) changes running_var by ~6e-4 relative at these sizes, so 1e-5 tells
//    biased from unbiased).
//  - global average pool, softmax cross-entropy: 1e-6 (same arithmetic, other summation order);
//  - sgd_update: 1e-6 (the same element math; FMA contraction on the GPU only);
//  - ReLU, add, scale, max pool forward (selection, no arithmetic; NaN propagates): bitwise equal. Max pool backward
//    is bitwise when windows do not overlap; with overlap an input can collect up to
//    ceil(k/s)^2 gradients, summed in another order: 1e-6.
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "cuda/allocator.hpp"
#include "src/ops/conv2d_gpu_algo.hpp"
#include "cuda/cuda_context.hpp"
#include "src/ops/batchnorm2d.hpp"
#include "src/ops/conv2d.hpp"
#include "src/ops/elementwise.hpp"
#include "src/ops/linear.hpp"
#include "src/ops/pool.hpp"
#include "src/ops/sgd_update.hpp"
#include "src/ops/softmax_xent.hpp"
#include "tests/gpu/gpu_test_util.hpp"

using namespace ht;
using namespace ht::gputest;

namespace {

struct OptionsGuard {
  cuda::Options saved = cuda::options();
  ~OptionsGuard() { cuda::set_options(saved); }
};

void set_strict(bool deterministic) {
  cuda::Options o = cuda::options();
  o.deterministic = deterministic;
  o.allow_tf32 = false;
  cuda::set_options(o);
}

/// Forward and backward of one conv shape on the GPU (through `gc`, which the caller may reuse across
/// shapes) against the CPU.
void conv_case(OpCachePtr& gc, const Conv2dShape& sh, bool bias, bool accumulate, bool deterministic, uint32_t seed) {
  OptionsGuard guard;
  set_strict(deterministic);
  INFO("conv n" << sh.n << " c" << sh.c << " " << sh.h << "x" << sh.w << " k" << sh.k << " " << sh.r << "x" << sh.s
                << " stride " << sh.stride << " pad " << sh.pad << " bias " << bias << " accumulate " << accumulate
                << " deterministic " << deterministic);
  Tensor x = randn({sh.n, sh.c, sh.h, sh.w}, seed);
  Tensor w = randn({sh.k, sh.c, sh.r, sh.s}, seed + 1, 0.f, 0.3f);
  Tensor b = randn({sh.k}, seed + 2);
  Tensor dy = randn({sh.n, sh.k, sh.p(), sh.q()}, seed + 3);
  Tensor dw0 = randn({sh.k, sh.c, sh.r, sh.s}, seed + 4);
  Tensor db0 = randn({sh.k}, seed + 5);

  OpCachePtr cc;
  Tensor y_ref = Tensor::empty({sh.n, sh.k, sh.p(), sh.q()});
  conv2d_forward_cpu(cc, sh, x, w, bias ? &b : nullptr, y_ref);
  Tensor xg = gpu(x), wg = gpu(w), bg = gpu(b), dyg = gpu(dy);
  Tensor yg = poisoned({sh.n, sh.k, sh.p(), sh.q()});
  conv2d_forward(gc, sh, xg, wg, bias ? &bg : nullptr, yg);  // the dispatcher, as the layers call it
  CHECK(rel_err(yg, y_ref) < 1e-4);

  Tensor dx_ref = Tensor::empty(x.shape()), dw_ref = Tensor::empty(w.shape()), db_ref = Tensor::empty({sh.k});
  dw_ref.copy_from(dw0);
  db_ref.copy_from(db0);
  conv2d_backward_cpu(cc, sh, x, w, dy, &dx_ref, dw_ref, bias ? &db_ref : nullptr, accumulate);
  Tensor dxg = poisoned(x.shape());
  Tensor dwg = gpu(dw0), dbg = gpu(db0);
  conv2d_backward(gc, sh, xg, wg, dyg, &dxg, dwg, bias ? &dbg : nullptr, accumulate);
  INFO("cuDNN choice: " << cuda::conv2d_algo_text(sh));
  CHECK(rel_err(dxg, dx_ref) < 1e-4);
  CHECK(rel_err(dwg, dw_ref) < 1e-4);
  if (bias) CHECK(rel_err(dbg, db_ref) < 1e-4);

  if (deterministic) {  // a second forward and backward give bitwise the same results
    Tensor y2 = poisoned(yg.shape());
    conv2d_forward(gc, sh, xg, wg, bias ? &bg : nullptr, y2);
    CHECK(bit_equal(y2, host(yg)));
    Tensor dx2 = poisoned(x.shape());
    Tensor dw2 = gpu(dw0), db2 = gpu(db0);
    conv2d_backward(gc, sh, xg, wg, dyg, &dx2, dw2, bias ? &db2 : nullptr, accumulate);
    CHECK(bit_equal(dx2, host(dxg)));
    CHECK(bit_equal(dw2, host(dwg)));
    if (bias) CHECK(bit_equal(db2, host(dbg)));
  }
}

void conv_case(const Conv2dShape& sh, bool bias, bool accumulate, bool deterministic, uint32_t seed) {
  OpCachePtr gc;
  conv_case(gc, sh, bias, accumulate, deterministic, seed);
}

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

TEST_CASE("conv2d on the GPU matches the CPU (rel 1e-4)", "[gpu_ops][conv2d]") {
  Conv2dShape a{2, 3, 9, 9, 4, 3, 3, 1, 1};       // 3x3 same padding, with bias
  Conv2dShape b{2, 8, 8, 8, 6, 3, 3, 2, 1};       // 3x3 stride 2 (ResNet down-sampling block)
  Conv2dShape c{3, 16, 8, 8, 32, 1, 1, 2, 0};     // 1x1 stride 2 shortcut
  Conv2dShape d{4, 64, 16, 16, 64, 3, 3, 1, 1};   // a ResNet-18 CIFAR body layer (Winograd/FFT candidates)
  Conv2dShape e{2, 5, 7, 10, 6, 3, 3, 2, 1};      // non-square, odd; stride 2 drops the last padded column
  Conv2dShape f{2, 3, 15, 15, 8, 7, 7, 2, 3};     // ImageNet-style 7x7/2 stem, pad 3
  for (bool det : {false, true}) {
    conv_case(a, true, false, det, 10);
    conv_case(a, true, true, det, 20);
    conv_case(b, false, false, det, 30);
    conv_case(c, false, true, det, 40);
    conv_case(d, false, false, det, 50);
    conv_case(e, true, true, det, 60);
    conv_case(f, false, false, det, 70);
  }
}

TEST_CASE("conv2d reuses one layer cache across shape changes", "[gpu_ops][conv2d]") {
  // A layer sees a smaller last batch, then the full one again: descriptors are rebuilt each time.
  OpCachePtr gc;
  conv_case(gc, Conv2dShape{4, 8, 10, 10, 6, 3, 3, 1, 1}, true, false, false, 80);
  conv_case(gc, Conv2dShape{3, 8, 10, 10, 6, 3, 3, 1, 1}, true, true, false, 90);
  conv_case(gc, Conv2dShape{4, 8, 10, 10, 6, 3, 3, 1, 1}, true, false, true, 100);
}

TEST_CASE("conv2d without a data gradient still gives dw", "[gpu_ops][conv2d]") {
  OptionsGuard guard;
  set_strict(false);
  Conv2dShape sh{2, 3, 6, 6, 4, 3, 3, 1, 1};
  Tensor x = randn({2, 3, 6, 6}, 1), w = randn({4, 3, 3, 3}, 2), dy = randn({2, 4, 6, 6}, 3);
  OpCachePtr cc, gc;
  Tensor dw_ref = Tensor::empty(w.shape());
  conv2d_backward_cpu(cc, sh, x, w, dy, nullptr, dw_ref, nullptr, false);
  Tensor dwg = poisoned(w.shape());
  conv2d_backward_gpu(gc, sh, gpu(x), gpu(w), gpu(dy), nullptr, dwg, nullptr, false);
  CHECK(rel_err(dwg, dw_ref) < 1e-4);
}

TEST_CASE("conv2d rejects a CPU tensor and a wrong shape", "[gpu_ops][conv2d]") {
  Conv2dShape sh{1, 1, 4, 4, 1, 3, 3, 1, 1};
  OpCachePtr gc;
  Tensor xg = gpu(randn({1, 1, 4, 4}, 1)), w = randn({1, 1, 3, 3}, 2);
  Tensor yg = Tensor::empty({1, 1, 4, 4}, DType::f32, Device::cuda);
  CHECK_THROWS_AS(conv2d_forward(gc, sh, xg, w, nullptr, yg), RuntimeError);  // w on the CPU
  Tensor ybad = Tensor::empty({1, 1, 3, 3}, DType::f32, Device::cuda);
  CHECK_THROWS_AS(conv2d_forward(gc, sh, xg, gpu(w), nullptr, ybad), RuntimeError);
}

TEST_CASE("conv2d and linear with TF32 allowed stay within 5e-3 of the CPU", "[gpu_ops][conv2d][linear]") {
  // Runs cuDNN's (algorithm, math type) pairs with tensor-op math as chosen, and cuBLAS in
  // CUBLAS_TF32_TENSOR_OP_MATH; strict mode is restored afterwards (OptionsGuard).
  OptionsGuard guard;
  cuda::Options o = cuda::options();
  o.allow_tf32 = true;
  o.deterministic = false;
  cuda::set_options(o);
  const Conv2dShape sh{4, 64, 16, 16, 64, 3, 3, 1, 1};
  Tensor x = randn({sh.n, sh.c, sh.h, sh.w}, 200), w = randn({sh.k, sh.c, sh.r, sh.s}, 201, 0.f, 0.3f);
  Tensor dy = randn({sh.n, sh.k, sh.p(), sh.q()}, 202);
  OpCachePtr cc, gc;
  Tensor y_ref = Tensor::empty({sh.n, sh.k, sh.p(), sh.q()}), dx_ref = Tensor::empty(x.shape());
  Tensor dw_ref = Tensor::empty(w.shape());
  conv2d_forward_cpu(cc, sh, x, w, nullptr, y_ref);
  conv2d_backward_cpu(cc, sh, x, w, dy, &dx_ref, dw_ref, nullptr, false);
  Tensor xg = gpu(x), wg = gpu(w), yg = poisoned(y_ref.shape()), dxg = poisoned(x.shape()), dwg = poisoned(w.shape());
  conv2d_forward(gc, sh, xg, wg, nullptr, yg);
  conv2d_backward(gc, sh, xg, wg, gpu(dy), &dxg, dwg, nullptr, false);
  INFO("cuDNN choice: " << cuda::conv2d_algo_text(sh));
  CHECK(rel_err(yg, y_ref) < 5e-3);
  CHECK(rel_err(dxg, dx_ref) < 5e-3);
  CHECK(rel_err(dwg, dw_ref) < 5e-3);

  const LinearShape ls{64, 3136, 128};
  Tensor lx = randn({ls.n, ls.in}, 203), lw = randn({ls.out, ls.in}, 204, 0.f, 0.2f), ly = randn({ls.n, ls.out}, 205);
  Tensor lb = randn({ls.out}, 206);
  Tensor lyr = Tensor::empty({ls.n, ls.out}), ldx = Tensor::empty(lx.shape()), ldw = Tensor::empty(lw.shape());
  Tensor ldb = Tensor::empty({ls.out});
  OpCachePtr lcc;
  linear_forward_cpu(lcc, ls, lx, lw, &lb, lyr);
  linear_backward_cpu(lcc, ls, lx, lw, ly, &ldx, ldw, &ldb, false);
  Tensor lxg = gpu(lx), lwg = gpu(lw), lbg = gpu(lb);
  Tensor lyg = poisoned(lyr.shape()), ldxg = poisoned(lx.shape()), ldwg = poisoned(lw.shape()), ldbg = poisoned({ls.out});
  OpCachePtr lc;
  linear_forward(lc, ls, lxg, lwg, &lbg, lyg);
  linear_backward(lc, ls, lxg, lwg, gpu(ly), &ldxg, ldwg, &ldbg, false);
  CHECK(rel_err(lyg, lyr) < 5e-3);
  CHECK(rel_err(ldxg, ldx) < 5e-3);
  CHECK(rel_err(ldwg, ldw) < 5e-3);
  CHECK(rel_err(ldbg, ldb) < 1e-5);  // own kernel, FP32 whatever the math mode
}

TEST_CASE("linear on the GPU matches the CPU (rel 1e-4)", "[gpu_ops][linear]") {
  OptionsGuard guard;
  set_strict(false);
  // fmnist_cnn/ResNet heads and an odd shape; with and without bias, data gradient and accumulation.
  for (LinearShape sh : {LinearShape{7, 33, 10}, LinearShape{64, 3136, 128}, LinearShape{128, 512, 10}}) {
    for (int variant = 0; variant < 4; ++variant) {
      const bool acc = variant & 1, bias = variant != 2, want_dx = variant != 3;
      INFO("n " << sh.n << " in " << sh.in << " out " << sh.out << " accumulate " << acc << " bias " << bias
                << " dx " << want_dx);
      const uint32_t seed = static_cast<uint32_t>(sh.in + variant * 17);
      Tensor x = randn({sh.n, sh.in}, seed), w = randn({sh.out, sh.in}, seed + 1, 0.f, 0.2f);
      Tensor b = randn({sh.out}, seed + 2), dy = randn({sh.n, sh.out}, seed + 3);
      Tensor dw0 = randn({sh.out, sh.in}, seed + 4), db0 = randn({sh.out}, seed + 5);
      OpCachePtr cc, gc;
      Tensor y_ref = Tensor::empty({sh.n, sh.out});
      linear_forward_cpu(cc, sh, x, w, bias ? &b : nullptr, y_ref);
      Tensor xg = gpu(x), wg = gpu(w), bg = gpu(b);
      Tensor yg = poisoned({sh.n, sh.out});
      linear_forward(gc, sh, xg, wg, bias ? &bg : nullptr, yg);
      CHECK(rel_err(yg, y_ref) < 1e-4);
      Tensor dx_ref = Tensor::empty({sh.n, sh.in}), dw_ref = Tensor::empty({sh.out, sh.in});
      Tensor db_ref = Tensor::empty({sh.out});
      dw_ref.copy_from(dw0);
      db_ref.copy_from(db0);
      linear_backward_cpu(cc, sh, x, w, dy, want_dx ? &dx_ref : nullptr, dw_ref, bias ? &db_ref : nullptr, acc);
      Tensor dxg = poisoned({sh.n, sh.in}), dwg = gpu(dw0), dbg = gpu(db0);
      linear_backward(gc, sh, xg, wg, gpu(dy), want_dx ? &dxg : nullptr, dwg, bias ? &dbg : nullptr, acc);
      if (want_dx) CHECK(rel_err(dxg, dx_ref) < 1e-4);
      CHECK(rel_err(dwg, dw_ref) < 1e-4);
      if (bias) CHECK(rel_err(dbg, db_ref) < 1e-4);
      else CHECK(bit_equal(dbg, db0));  // untouched without bias
    }
  }
}

TEST_CASE("batchnorm2d on the GPU matches the CPU, PyTorch running statistics", "[gpu_ops][batchnorm]") {
  for (BatchNormShape sh : {BatchNormShape{4, 5, 6, 7, 1e-5f, 0.1f}, BatchNormShape{16, 32, 10, 10, 1e-3f, 0.3f}}) {
    INFO("bn " << sh.n << "x" << sh.c << "x" << sh.h << "x" << sh.w << " eps " << sh.eps << " momentum "
               << sh.momentum);
    const std::vector<int64_t> xs{sh.n, sh.c, sh.h, sh.w};
    const int64_t c = sh.c;
    Tensor x = randn(xs, 1, 0.5f, 2.f), gamma = randn({c}, 2, 1.f, 0.1f), beta = randn({c}, 3);
    Tensor rm = randn({c}, 4, 0.f, 0.1f), rv = randn({c}, 5, 1.f, 0.05f);
    OpCachePtr cc, gc;
    Tensor y_ref = Tensor::empty(xs), sm_ref = Tensor::empty({c}), si_ref = Tensor::empty({c});
    Tensor rm_ref = Tensor::empty({c}), rv_ref = Tensor::empty({c});
    rm_ref.copy_from(rm);
    rv_ref.copy_from(rv);
    batchnorm2d_forward_train_cpu(cc, sh, x, gamma, beta, y_ref, rm_ref, rv_ref, sm_ref, si_ref);
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

TEST_CASE("element-wise ops on the GPU equal the CPU bitwise", "[gpu_ops][elementwise]") {
  const std::vector<int64_t> s{3, 1000, 7};
  Tensor a = randn(s, 1), b = randn(s, 2), dy = randn(s, 3);
  Tensor r_ref = Tensor::empty(s), dr_ref = Tensor::empty(s), add_ref = Tensor::empty(s);
  relu_forward_cpu(a, r_ref);
  relu_backward_cpu(r_ref, dy, dr_ref);
  add_forward_cpu(a, b, add_ref);
  Tensor ag = gpu(a), bg = gpu(b);
  Tensor rg = poisoned(s), drg = poisoned(s), addg = poisoned(s);
  relu_forward(ag, rg);
  relu_backward(rg, gpu(dy), drg);
  add_forward(ag, bg, addg);
  CHECK(bit_equal(rg, r_ref));
  CHECK(bit_equal(drg, dr_ref));
  CHECK(bit_equal(addg, add_ref));

  Tensor inplace_ref = Tensor::empty(s);
  inplace_ref.copy_from(a);
  add_inplace_cpu(inplace_ref, b);
  scale_inplace_cpu(inplace_ref, 0.37f);
  Tensor ig = gpu(a);
  add_inplace(ig, bg);
  scale_inplace(ig, 0.37f);
  CHECK(bit_equal(ig, inplace_ref));

  Tensor alias = gpu(a);  // relu in place (y aliases x)
  relu_forward(alias, alias);
  CHECK(bit_equal(alias, r_ref));
}

TEST_CASE("count_nonfinite on the GPU counts NaN and Inf like the CPU", "[gpu_ops][elementwise]") {
  Tensor x = randn({1 << 20}, 4);
  CHECK(count_nonfinite(gpu(x)) == 0);
  auto v = x.span<float>();
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (int i = 0; i < 7; ++i) v[static_cast<size_t>(i) * 100003] = nan;
  v[5] = inf;
  v[999999] = -inf;
  v[v.size() - 1] = inf;
  v[17] = std::numeric_limits<float>::max();  // finite
  CHECK(count_nonfinite_cpu(x) == 10);
  CHECK(count_nonfinite(gpu(x)) == 10);
}

TEST_CASE("sgd_update on the GPU matches the CPU (rel 1e-6)", "[gpu_ops][sgd]") {
  // Three steps over more elements than one grid covers (the kernel caps its grid at 4096 x 256, so
  // the grid-stride loop runs), on a sub-range: the elements outside it must stay untouched. nvcc
  // contracts g + wd*p and momentum*buf + g into FMAs, the CPU build may not: the results differ by
  // rounding only, far under 1e-6 of the largest value, while any indexing, sign, nesterov or
  // weight-decay error is O(lr).
  const int64_t n = int64_t{4096} * 256 * 2 + 37, lo = 13, hi = n - 5;
  for (bool nesterov : {false, true}) {
    for (float wd : {0.f, 5e-4f}) {
      INFO("nesterov " << nesterov << " weight decay " << wd);
      Tensor p = randn({n}, 21), buf = randn({n}, 22, 0.f, 0.1f);
      Tensor pg = gpu(p), bufg = gpu(buf);
      for (int step = 0; step < 3; ++step) {
        Tensor g = randn({n}, 30 + static_cast<uint32_t>(step));
        Tensor gg = gpu(g);
        const float lr = 0.1f / (step + 1), momentum = 0.9f;
        sgd_update_cpu(p.data<float>() + lo, g.data<float>() + lo, buf.data<float>() + lo, hi - lo, lr, momentum, wd,
                        nesterov);
        sgd_update(Device::cuda, pg.data<float>() + lo, gg.data<float>() + lo, bufg.data<float>() + lo, hi - lo, lr,
                   momentum, wd, nesterov);  // the dispatcher, as the optimizer calls it
      }
      CHECK(rel_err(pg, p) < 1e-6);
      CHECK(rel_err(bufg, buf) < 1e-6);
      Tensor ph = host(pg), p0 = randn({n}, 21);
      for (int64_t i : {int64_t{0}, lo - 1, hi, n - 1}) {  // outside [lo, hi): the initial values
        INFO("element " << i);
        CHECK(std::memcmp(&ph.span<float>()[static_cast<size_t>(i)], &p0.span<float>()[static_cast<size_t>(i)],
                          sizeof(float)) == 0);
      }
    }
  }
  sgd_update(Device::cuda, nullptr, nullptr, nullptr, 0, 0.1f, 0.9f, 0.f, false);  // n = 0: nothing to do
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
}

TEST_CASE("softmax cross-entropy on the GPU matches the CPU (rel 1e-6)", "[gpu_ops][softmax_xent]") {
  for (int k : {10, 1000}) {
    for (float eps : {0.f, 0.1f}) {
      INFO("K " << k << " label_smoothing " << eps);
      const int64_t n = 37;
      Tensor z = randn({n, k}, 7, 0.f, 3.f);
      Tensor lab = Tensor::empty({n}, DType::i32);
      for (int64_t i = 0; i < n; ++i) lab.span<int32_t>()[i] = static_cast<int32_t>((i * 7919) % k);
      // Make some rows right, with a tie at the maximum (first index wins, as torch.argmax).
      z.span<float>()[0 * k + lab.span<int32_t>()[0]] = 50.f;
      z.span<float>()[1 * k + lab.span<int32_t>()[1]] = 50.f;
      z.span<float>()[1 * k + (lab.span<int32_t>()[1] + 1) % k] = 50.f;
      Tensor p_ref = Tensor::empty({n, k}), d_ref = Tensor::empty({n, k});
      int64_t right_ref = -1, right = -2;
      const double loss_ref = softmax_xent_forward_cpu(z, lab, eps, p_ref, &right_ref);
      softmax_xent_backward_cpu(p_ref, lab, eps, 0.5f, d_ref);
      Tensor zg = gpu(z), lg = gpu(lab);
      Tensor pg = poisoned({n, k}), dg = poisoned({n, k});
      const double loss = softmax_xent_forward(zg, lg, eps, pg, &right);
      softmax_xent_backward(pg, lg, eps, 0.5f, dg);
      CHECK(std::fabs(loss - loss_ref) <= 1e-6 * std::fabs(loss_ref));
      CHECK(right == right_ref);
      CHECK(rel_err(pg, p_ref) < 1e-6);
      CHECK(rel_err(dg, d_ref) < 1e-6);
    }
  }
}

TEST_CASE("softmax cross-entropy on the GPU reports a label out of range", "[gpu_ops][softmax_xent]") {
  Tensor z = randn({4, 3}, 1);
  Tensor lab = Tensor::empty({4}, DType::i32);
  auto l = lab.span<int32_t>();
  l[0] = 0; l[1] = 2; l[2] = 3; l[3] = 1;
  Tensor pg = Tensor::empty({4, 3}, DType::f32, Device::cuda);
  try {
    softmax_xent_forward(gpu(z), gpu(lab), 0.f, pg, nullptr);
    FAIL("no error for label 3 with K = 3");
  } catch (const RuntimeError& e) {
    CHECK(std::string(e.what()).find("label 3 of row 2") != std::string::npos);
  }
}

TEST_CASE("CUDA out of memory names the layer, the bytes and the remedies", "[gpu_ops][allocator]") {
  cuda::CurrentLayer layer("layer3.1.conv2");
  // The device's memory plus 1 GiB: a request that fails as out of memory. (A far larger one, such
  // as 1 PiB, can fail earlier in the virtual-address reservation, with another error code.)
  size_t free_b = 0, total_b = 0;
  REQUIRE(cudaMemGetInfo(&free_b, &total_b) == cudaSuccess);
  const int64_t want = static_cast<int64_t>(total_b) + (int64_t{1} << 30);
  try {
    Tensor t = Tensor::empty({want}, DType::u8, Device::cuda);
    FAIL("an allocation of the device's memory + 1 GiB succeeded");
  } catch (const RuntimeError& e) {
    const std::string m = e.what();
    INFO(m);
    CHECK(m.find("out of memory") != std::string::npos);
    CHECK(m.find("layer3.1.conv2") != std::string::npos);
    CHECK(m.find(std::to_string(want) + " bytes") != std::string::npos);
    CHECK(m.find("accumulation_steps") != std::string::npos);
    CHECK(m.find("bf16") != std::string::npos);
  }
  // The allocator still works afterwards.
  Tensor ok = Tensor::zeros({1024}, DType::f32, Device::cuda);
  CHECK(count_nonfinite(ok) == 0);
  CHECK(cuda::memory_stats().used_bytes >= 4096);
}
