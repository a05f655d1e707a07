// conv2d and linear: the CUDA halves against the CPU halves (fp32, strict FP32 math: no TF32).
// Inputs are seeded random normals (never zeros); every output starts as NaN (gputest::poisoned) so
// an element an op forgets to write fails the check; parameter gradients start as random values, so
// overwrite (beta 0) vs accumulate (beta 1) is checked both ways. Tolerances are relative to the
// largest reference magnitude (gputest::rel_err) and stated per op.
// Tolerance 1e-4: both sides sum up to C*R*S (here <= 576) fp32 products in different orders; the
// CPU may use Winograd (error up to ~5e-6 of max|y|, results/cpu/conv2d_linear_ops.md), cuDNN may
// choose FFT/Winograd, whose fp32 error is larger than a direct sum's (~1e-5 seen elsewhere); 1e-4
// leaves 10x margin yet still catches any indexing, transposition, stride, padding or beta error
// (those give O(1) errors). TF32 (inputs rounded to a 10-bit mantissa: ~5e-4 relative whatever the
// sum length) would fail it, so these tests also show strict FP32 is in effect. With TF32 allowed
// (train.precision = tf32) the bound is 5e-3.
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "cuda/cuda_context.hpp"
#include "src/ops/conv2d.hpp"
#include "src/ops/conv2d_gpu_algo.hpp"
#include "src/ops/linear.hpp"
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
