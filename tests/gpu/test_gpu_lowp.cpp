// The GPU's bfloat16 and float16 ops (NHWC activations, float32 compute and parameters) against the
// CPU's float32 implementation, and the conversions and the bf16 gradient wire against the host's
// rounding (base/bf16.hpp).
//
// Inputs are seeded random normals rounded to the format on the host first, and the CPU reference
// runs on those rounded values, so the reference and the GPU see the same operands; what remains is
// the rounding of the GPU's low-precision results (and of its float32 sums in another order). Each
// check's bound is lowp_tol(dtype, k) = 2 * k * 2^-p + 1e-4 of the largest reference magnitude for a
// result rounded k times to a format of p significand bits (bf16 p = 8: 2^-8 = 3.9e-3; fp16 p = 11:
// 2^-11 = 4.9e-4): k = 1 for a conv/GEMM output, a pooled or normalised value, a data or filter
// gradient; k = 2 for a conv output with bias (rounded after the convolution, again after the add).
// Float32 results of low-precision operands (linear's logits and dw, bias gradients, batch-norm
// statistics) have k = 0 apart from their inputs: 1e-4 plus the rounding of dy where it was rounded.
// Products of two bf16 (or fp16) values are exact in float32, so tensor-core math adds no error
// beyond the accumulation order. An indexing, layout (NHWC vs NCHW, KRSC vs KCRS) or beta error
// gives O(1) errors, far above every bound. Outputs start as NaN (an unwritten element fails).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>

#include "src/ops/conv2d_gpu_algo.hpp"
#include "src/ops/convert_gpu.hpp"
#include "cuda/cuda_context.hpp"
#include "mpi/gpu/nccl_communicator.hpp"
#include "src/ops/batchnorm2d.hpp"
#include "src/ops/conv2d.hpp"
#include "src/ops/convert.hpp"
#include "src/ops/elementwise.hpp"
#include "src/ops/linear.hpp"
#include "src/ops/pool.hpp"
#include "tests/gpu/lowp_test_util.hpp"

using namespace ht;
using namespace ht::gputest;

namespace {

const char* name(DType t) { return t == DType::bf16 ? "bf16" : "fp16"; }

void conv_lowp_case(DType t, const Conv2dShape& sh, bool bias, bool accumulate, uint32_t seed) {
  INFO(name(t) << " conv n" << sh.n << " c" << sh.c << " " << sh.h << "x" << sh.w << " k" << sh.k << " " << sh.r << "x"
               << sh.s << " stride " << sh.stride << " pad " << sh.pad << " bias " << bias << " accumulate "
               << accumulate);
  Tensor x = rounded(randn({sh.n, sh.c, sh.h, sh.w}, seed), t);
  Tensor w = rounded(randn({sh.k, sh.c, sh.r, sh.s}, seed + 1, 0.f, 0.3f), t);
  Tensor b = randn({sh.k}, seed + 2);
  Tensor dy = rounded(randn({sh.n, sh.k, sh.p(), sh.q()}, seed + 3), t);
  Tensor dw0 = randn(w.shape(), seed + 4), db0 = randn({sh.k}, seed + 5);
  OpCachePtr cc, gc;
  Tensor y_ref = Tensor::empty({sh.n, sh.k, sh.p(), sh.q()});
  conv2d_forward_cpu(cc, sh, x, w, bias ? &b : nullptr, y_ref);
  Tensor xg = gpu_as(x, t), dyg = gpu_as(dy, t), wg = gpu(w), bg = gpu(b);
  Tensor yg = poisoned_as(y_ref.shape(), t);
  conv2d_forward_gpu(gc, sh, xg, wg, bias ? &bg : nullptr, yg);
  INFO("cuDNN choice: " << cuda::conv2d_algo_text(sh, t));
  CHECK(rel_err_any(yg, y_ref) < lowp_tol(t, bias ? 2 : 1));

  Tensor dx_ref = Tensor::empty(x.shape()), dw_ref = Tensor::empty(w.shape()), db_ref = Tensor::empty({sh.k});
  dw_ref.copy_from(dw0);
  db_ref.copy_from(db0);
  conv2d_backward_cpu(cc, sh, x, w, dy, &dx_ref, dw_ref, bias ? &db_ref : nullptr, accumulate);
  Tensor dxg = poisoned_as(x.shape(), t), dwg = gpu(dw0), dbg = gpu(db0);
  conv2d_backward_gpu(gc, sh, xg, wg, dyg, &dxg, dwg, bias ? &dbg : nullptr, accumulate);
  CHECK(rel_err_any(dxg, dx_ref) < lowp_tol(t, 1));
  CHECK(dwg.dtype() == DType::f32);
  CHECK(rel_err(dwg, dw_ref) < lowp_tol(t, 1));  // cuDNN's low-precision dw, widened (+ dw0 in float32)
  if (bias) CHECK(rel_err(dbg, db_ref) < 1e-4);  // float32 sums of the same rounded dy
}

}  // namespace

TEST_CASE("conv2d in bf16/fp16 NHWC on the GPU matches the CPU's fp32", "[gpu_lowp][conv2d]") {
  for (DType t : {DType::bf16, DType::f16}) {
    conv_lowp_case(t, Conv2dShape{2, 3, 9, 9, 4, 3, 3, 1, 1}, true, false, 10);      // the stem, with bias
    conv_lowp_case(t, Conv2dShape{2, 3, 9, 9, 4, 3, 3, 1, 1}, true, true, 20);       // accumulate
    conv_lowp_case(t, Conv2dShape{2, 8, 8, 8, 16, 3, 3, 2, 1}, false, false, 30);    // 3x3 stride 2
    conv_lowp_case(t, Conv2dShape{3, 16, 8, 8, 32, 1, 1, 2, 0}, false, true, 40);    // 1x1 stride 2 shortcut
    conv_lowp_case(t, Conv2dShape{8, 64, 16, 16, 64, 3, 3, 1, 1}, false, false, 50); // a ResNet-18 body layer
    conv_lowp_case(t, Conv2dShape{2, 5, 7, 10, 6, 3, 3, 2, 1}, true, true, 60);      // odd, channels not /8
  }
}

TEST_CASE("conv2d in bf16 under train.deterministic gives bitwise-equal reruns", "[gpu_lowp][conv2d]") {
  cuda::Options saved = cuda::options(), o = saved;
  o.deterministic = true;
  cuda::set_options(o);
  const Conv2dShape sh{4, 32, 8, 8, 32, 3, 3, 1, 1};
  Tensor x = randn({sh.n, sh.c, sh.h, sh.w}, 1), w = randn({sh.k, sh.c, sh.r, sh.s}, 2, 0.f, 0.3f);
  Tensor dy = randn({sh.n, sh.k, sh.p(), sh.q()}, 3);
  Tensor xg = gpu_as(x, DType::bf16), dyg = gpu_as(dy, DType::bf16), wg = gpu(w);
  Tensor r[2][3];
  for (auto& run : r) {
    OpCachePtr gc;
    run[0] = poisoned_as({sh.n, sh.k, sh.p(), sh.q()}, DType::bf16);
    run[1] = poisoned_as(x.shape(), DType::bf16);
    run[2] = poisoned(w.shape());
    conv2d_forward_gpu(gc, sh, xg, wg, nullptr, run[0]);
    conv2d_backward_gpu(gc, sh, xg, wg, dyg, &run[1], run[2], nullptr, false);
  }
  cuda::set_options(saved);
  for (int i = 0; i < 3; ++i) CHECK(bit_equal(gpu(host_f32(r[0][i])), host_f32(r[1][i])));
}

TEST_CASE("linear with bf16/fp16 operands on the GPU matches the CPU's fp32", "[gpu_lowp][linear]") {
  for (DType t : {DType::bf16, DType::f16}) {
    for (bool f32_out : {true, false}) {  // logits in float32 (the model head), or in x's dtype
      const LinearShape sh{64, 512, 10};
      INFO(name(t) << " output " << (f32_out ? "f32" : name(t)));
      Tensor x = rounded(randn({sh.n, sh.in}, 1), t), w = rounded(randn({sh.out, sh.in}, 2, 0.f, 0.2f), t);
      Tensor b = randn({sh.out}, 3), dy = rounded(randn({sh.n, sh.out}, 4), t);
      Tensor dw0 = randn(w.shape(), 5), db0 = randn({sh.out}, 6);
      OpCachePtr cc, gc;
      Tensor y_ref = Tensor::empty({sh.n, sh.out});
      linear_forward_cpu(cc, sh, x, w, &b, y_ref);
      const DType yt = f32_out ? DType::f32 : t;
      Tensor xg = gpu_as(x, t), wg = gpu(w), bg = gpu(b);
      Tensor yg = f32_out ? poisoned({sh.n, sh.out}) : poisoned_as({sh.n, sh.out}, t);
      linear_forward_gpu(gc, sh, xg, wg, &bg, yg);
      CHECK(yg.dtype() == yt);
      CHECK(rel_err_any(yg, y_ref) < (f32_out ? 1e-4 : lowp_tol(t, 2)));
      Tensor dx_ref = Tensor::empty(x.shape()), dw_ref = Tensor::empty(w.shape()), db_ref = Tensor::empty({sh.out});
      dw_ref.copy_from(dw0);
      db_ref.copy_from(db0);
      linear_backward_cpu(cc, sh, x, w, dy, &dx_ref, dw_ref, &db_ref, true);
      Tensor dyg = f32_out ? gpu(dy) : gpu_as(dy, t);  // dy in y's dtype
      Tensor dxg = poisoned_as(x.shape(), t), dwg = gpu(dw0), dbg = gpu(db0);
      linear_backward_gpu(gc, sh, xg, wg, dyg, &dxg, dwg, &dbg, true);
      CHECK(rel_err_any(dxg, dx_ref) < lowp_tol(t, 1));
      CHECK(rel_err(dwg, dw_ref) < 1e-4);  // float32 C of exact products: summation order only
      CHECK(rel_err(dbg, db_ref) < 1e-4);
    }
  }
}

TEST_CASE("batchnorm2d in bf16/fp16 NHWC with fp32 statistics matches the CPU", "[gpu_lowp][batchnorm]") {
  for (DType t : {DType::bf16, DType::f16}) {
    for (bool det : {false, true}) {  // SPATIAL_PERSISTENT, and SPATIAL under train.deterministic
      const BatchNormShape sh{16, 32, 10, 10, 1e-5f, 0.1f};
      INFO(name(t) << " deterministic " << det);
      cuda::Options saved = cuda::options(), o = saved;
      o.deterministic = det;
      cuda::set_options(o);
      const std::vector<int64_t> xs{sh.n, sh.c, sh.h, sh.w};
      const int64_t c = sh.c;
      const Tensor x = rounded(randn(xs, 1, 0.5f, 2.f), t), dy = rounded(randn(xs, 6), t);
      OpCachePtr cc, gc;
      auto [gamma, beta, rm, rv, y_ref, sm_ref, si_ref, rm_ref, rv_ref] = batchnorm_train_reference(cc, sh, x);
      Tensor xg = gpu_as(x, t), gg = gpu(gamma), bg = gpu(beta), rmg = gpu(rm), rvg = gpu(rv);
      Tensor yg = poisoned_as(xs, t), smg = poisoned({c}), sig = poisoned({c});
      batchnorm2d_forward_train_gpu(gc, sh, xg, gg, bg, yg, rmg, rvg, smg, sig);
      CHECK(rel_err_any(yg, y_ref) < lowp_tol(t, 1));
      CHECK(rel_err(smg, sm_ref) < 1e-5);  // float32 statistics of the same rounded x
      CHECK(rel_err(sig, si_ref) < 1e-5);
      CHECK(rel_err(rmg, rm_ref) < 1e-5);
      CHECK(rel_err(rvg, rv_ref) < 1e-5);
      Tensor dx_ref = Tensor::empty(xs), dg_ref = Tensor::empty({c}), db_ref = Tensor::empty({c});
      batchnorm2d_backward_cpu(cc, sh, x, dy, gamma, sm_ref, si_ref, dx_ref, dg_ref, db_ref, false);
      Tensor dxg = poisoned_as(xs, t), dgg = poisoned({c}), dbg = poisoned({c});
      batchnorm2d_backward_gpu(gc, sh, xg, gpu_as(dy, t), gg, smg, sig, dxg, dgg, dbg, false);
      CHECK(rel_err_any(dxg, dx_ref) < lowp_tol(t, 1));
      CHECK(rel_err(dgg, dg_ref) < 1e-4);
      CHECK(rel_err(dbg, db_ref) < 1e-4);
      // Accumulating (train.accumulation_steps > 1): dgamma and dbeta add to what they hold, in float32;
      // dx is written whole. The starting values are random, so overwriting fails the check.
      const Tensor dg0 = randn({c}, 7), db0 = randn({c}, 8);
      Tensor dxa_ref = Tensor::empty(xs), dga_ref = Tensor::empty({c}), dba_ref = Tensor::empty({c});
      dga_ref.copy_from(dg0);
      dba_ref.copy_from(db0);
      batchnorm2d_backward_cpu(cc, sh, x, dy, gamma, sm_ref, si_ref, dxa_ref, dga_ref, dba_ref, true);
      Tensor dxa = poisoned_as(xs, t), dga = gpu(dg0), dba = gpu(db0);
      batchnorm2d_backward_gpu(gc, sh, xg, gpu_as(dy, t), gg, smg, sig, dxa, dga, dba, true);
      CHECK(rel_err_any(dxa, dxa_ref) < lowp_tol(t, 1));
      CHECK(rel_err(dga, dga_ref) < 1e-4);
      CHECK(rel_err(dba, dba_ref) < 1e-4);
      Tensor yi_ref = Tensor::empty(xs), yig = poisoned_as(xs, t);
      batchnorm2d_forward_infer_cpu(cc, sh, x, gamma, beta, rm_ref, rv_ref, yi_ref);
      batchnorm2d_forward_infer_gpu(gc, sh, xg, gg, bg, rmg, rvg, yig);
      CHECK(rel_err_any(yig, yi_ref) < lowp_tol(t, 1));
      cuda::set_options(saved);
    }
  }
}

TEST_CASE("pooling in bf16/fp16 NHWC matches the CPU", "[gpu_lowp][pool]") {
  for (DType t : {DType::bf16, DType::f16}) {
    INFO(name(t));
    const PoolShape sh{2, 6, 9, 9, 3, 2, 1};
    Tensor x = rounded(randn({sh.n, sh.c, sh.h, sh.w}, 11, -3.f, 0.5f), t);  // negative: padding must be -inf
    Tensor dy = rounded(randn({sh.n, sh.c, sh.p(), sh.q()}, 12), t);
    OpCachePtr cc, gc;
    Tensor y_ref = Tensor::empty({sh.n, sh.c, sh.p(), sh.q()}), dx_ref = Tensor::empty(x.shape());
    maxpool2d_forward_cpu(cc, sh, x, y_ref);
    maxpool2d_backward_cpu(cc, sh, x, y_ref, dy, dx_ref);
    Tensor xg = gpu_as(x, t), yg = poisoned_as(y_ref.shape(), t), dxg = poisoned_as(x.shape(), t);
    maxpool2d_forward_gpu(gc, sh, xg, yg);
    maxpool2d_backward_gpu(gc, sh, xg, yg, gpu_as(dy, t), dxg);
    CHECK(bit_equal(gpu(host_f32(yg)), y_ref));  // a selection of representable values: exact
    CHECK(rel_err_any(dxg, dx_ref) < lowp_tol(t, 1));  // overlapping windows sum up to 4 gradients

    const std::vector<int64_t> xs{4, 24, 7, 7};
    Tensor gx = rounded(randn(xs, 13), t), gdy = rounded(randn({xs[0], xs[1]}, 14), t);
    Tensor gy_ref = Tensor::empty({xs[0], xs[1]}), gdx_ref = Tensor::empty(xs);
    global_avgpool_forward_cpu(cc, gx, gy_ref);
    global_avgpool_backward_cpu(cc, gdy, gdx_ref);
    Tensor gyg = poisoned_as({xs[0], xs[1]}, t), gdxg = poisoned_as(xs, t);
    global_avgpool_forward_gpu(gc, gpu_as(gx, t), gyg);
    global_avgpool_backward_gpu(gc, gpu_as(gdy, t), gdxg);
    CHECK(rel_err_any(gyg, gy_ref) < lowp_tol(t, 1));
    CHECK(rel_err_any(gdxg, gdx_ref) < lowp_tol(t, 1));
  }
}

TEST_CASE("element-wise ops in bf16/fp16 round like the host's shared math", "[gpu_lowp][elementwise]") {
  for (DType t : {DType::bf16, DType::f16}) {
    INFO(name(t));
    const std::vector<int64_t> s{2, 8, 5, 5};
    Tensor a = rounded(randn(s, 1), t), b = rounded(randn(s, 2), t), dy = rounded(randn(s, 3), t);
    // The expected values: the float math of src/ops/elementwise.hpp on the host, rounded once to t.
    Tensor relu_ref = Tensor::empty(s), add_ref = Tensor::empty(s), drelu_ref = Tensor::empty(s);
    relu_forward_cpu(a, relu_ref);
    relu_backward_cpu(relu_ref, dy, drelu_ref);
    add_forward_cpu(a, b, add_ref);
    add_ref = rounded(add_ref, t);
    Tensor ag = gpu_as(a, t), bg = gpu_as(b, t);
    Tensor rg = poisoned_as(s, t), drg = poisoned_as(s, t), addg = poisoned_as(s, t);
    relu_forward_gpu(ag, rg);
    relu_backward_gpu(rg, gpu_as(dy, t), drg);
    add_forward_gpu(ag, bg, addg);
    CHECK(bit_equal(gpu(host_f32(rg)), relu_ref));
    CHECK(bit_equal(gpu(host_f32(drg)), drelu_ref));
    CHECK(bit_equal(gpu(host_f32(addg)), add_ref));
    Tensor x = rounded(randn({1000}, 4), t);
    auto v = x.span<float>();
    v[3] = std::numeric_limits<float>::quiet_NaN();
    v[500] = std::numeric_limits<float>::infinity();
    CHECK(count_nonfinite_gpu(gpu_as(x, t)) == 2);  // NaN and infinity survive the format
  }
}

TEST_CASE("GPU conversions round as base/bf16.hpp and move NCHW to NHWC", "[gpu_lowp][convert]") {
  const std::vector<int64_t> s{3, 5, 4, 6};
  Tensor x = randn(s, 7, 0.f, 100.f);
  auto v = x.span<float>();
  v[0] = 1.f + std::ldexp(1.f, -8);  // a tie in bf16: to even (1.0)
  v[1] = 65520.f;                   // fp16 overflow: infinity
  v[2] = std::numeric_limits<float>::quiet_NaN();
  v[3] = 1e-7f;                     // an fp16 subnormal
  for (DType t : {DType::bf16, DType::f16}) {
    INFO(name(t));
    Tensor g = gpu_as(x, t);
    // The NHWC bits against the host's rounding of x[n, c, h, w], element by element.
    Tensor bits = host(g);
    const auto* raw = static_cast<const uint16_t*>(bits.raw());
    int wrong = 0;
    for (int64_t n = 0; n < s[0]; ++n)
      for (int64_t c = 0; c < s[1]; ++c)
        for (int64_t h = 0; h < s[2]; ++h)
          for (int64_t w = 0; w < s[3]; ++w) {
            const float f = v[static_cast<size_t>(((n * s[1] + c) * s[2] + h) * s[3] + w)];
            const uint16_t want = t == DType::bf16 ? to_bf16(f).bits : to_f16(f).bits;
            wrong += raw[((n * s[2] + h) * s[3] + w) * s[1] + c] != want;
          }
    CHECK(wrong == 0);
    CHECK(bit_equal(gpu(host_f32(g)), rounded(x, t)));  // and back to NCHW float32
    // Flatten: a 4-D NHWC tensor into [N, C*H*W] rows in NCHW order.
    Tensor flat = Tensor::empty({s[0], s[1] * s[2] * s[3]}, t, Device::cuda);
    cuda::convert_any(g, flat);
    CHECK(bit_equal(gpu(host_f32(flat)), rounded(x, t).view({s[0], s[1] * s[2] * s[3]})));
  }
}

TEST_CASE("NCCL with the bf16 gradient wire rounds each bucket once (one rank)", "[gpu_lowp][nccl]") {
  auto comm = make_nccl_communicator(60.0, DType::bf16);
  Tensor ref = randn({100003}, 9);
  Tensor g = gpu(ref);
  std::span<float> a(static_cast<float*>(g.raw()), 50000);
  std::span<float> b(static_cast<float*>(g.raw()) + 50000, static_cast<size_t>(g.numel()) - 50000);
  for (int step = 0; step < 2; ++step) {  // the second step reuses the wire copies
    comm->start_allreduce_average(a);
    comm->start_allreduce_average(b);
    comm->wait_all();
    CHECK(bit_equal(g, rounded(ref, DType::bf16)));  // the average over one rank: the rounded value
  }
  Tensor h = gpu(ref);
  comm->allreduce_average(std::span<float>(static_cast<float*>(h.raw()), static_cast<size_t>(h.numel())));
  CHECK(bit_equal(h, ref));  // blocking collectives stay float32
  CHECK_THROWS_AS(make_nccl_communicator(60.0, DType::f16), RuntimeError);
}
