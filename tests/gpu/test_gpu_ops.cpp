// Each op's CUDA implementation against its CPU implementation (fp32, strict FP32 math: no TF32).
// Tolerances are relative to the largest reference magnitude (gputest::rel_err) and stated per op:
//  - conv2d, linear: 1e-4 (cuDNN/cuBLAS sum in other orders and may use Winograd/FFT algorithms);
//  - batch norm: 1e-4 for outputs and gradients, 1e-5 for the statistics;
//  - global average pool, softmax cross-entropy: 1e-6 (same arithmetic, other summation order);
//  - ReLU, add, scale, max pool (selection, no arithmetic): bitwise equal.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "cuda/allocator.hpp"
#include "cuda/cuda_context.hpp"
#include "src/ops/batchnorm2d.hpp"
#include "src/ops/conv2d.hpp"
#include "src/ops/elementwise.hpp"
#include "src/ops/linear.hpp"
#include "src/ops/pool.hpp"
#include "src/ops/softmax_xent.hpp"
#include "tests/gpu/gpu_test_util.hpp"

using namespace ht;
using namespace ht::gputest;

namespace {

struct OptionsGuard {
  cuda::Options saved = cuda::options();
  ~OptionsGuard() { cuda::set_options(saved); }
};

void conv_case(const Conv2dShape& sh, bool bias, bool accumulate, bool deterministic, uint32_t seed) {
  OptionsGuard guard;
  cuda::Options o = guard.saved;
  o.deterministic = deterministic;
  o.allow_tf32 = false;
  cuda::set_options(o);
  INFO("conv n" << sh.n << " c" << sh.c << " " << sh.h << "x" << sh.w << " k" << sh.k << " " << sh.r << "x" << sh.s
                << " stride " << sh.stride << " pad " << sh.pad << " bias " << bias << " accumulate " << accumulate
                << " deterministic " << deterministic);
  Tensor x = randn({sh.n, sh.c, sh.h, sh.w}, seed);
  Tensor w = randn({sh.k, sh.c, sh.r, sh.s}, seed + 1, 0.f, 0.3f);
  Tensor b = randn({sh.k}, seed + 2);
  Tensor dy = randn({sh.n, sh.k, sh.p(), sh.q()}, seed + 3);
  Tensor dw0 = randn({sh.k, sh.c, sh.r, sh.s}, seed + 4);
  Tensor db0 = randn({sh.k}, seed + 5);

  OpCachePtr cc, gc;
  Tensor y_ref = Tensor::empty({sh.n, sh.k, sh.p(), sh.q()});
  cpu::conv2d_forward(cc, sh, x, w, bias ? &b : nullptr, y_ref);
  Tensor xg = gpu(x), wg = gpu(w), bg = gpu(b), dyg = gpu(dy);
  Tensor yg = Tensor::empty({sh.n, sh.k, sh.p(), sh.q()}, DType::f32, Device::cuda);
  conv2d_forward(gc, sh, xg, wg, bias ? &bg : nullptr, yg);  // the dispatcher, as the layers call it
  CHECK(rel_err(yg, y_ref) < 1e-4);

  Tensor dx_ref = Tensor::empty(x.shape()), dw_ref = Tensor::empty(w.shape()), db_ref = Tensor::empty({sh.k});
  dw_ref.copy_from(dw0);
  db_ref.copy_from(db0);
  cpu::conv2d_backward(cc, sh, x, w, dy, &dx_ref, dw_ref, bias ? &db_ref : nullptr, accumulate);
  Tensor dxg = Tensor::empty(x.shape(), DType::f32, Device::cuda);
  Tensor dwg = gpu(dw0), dbg = gpu(db0);
  conv2d_backward(gc, sh, xg, wg, dyg, &dxg, dwg, bias ? &dbg : nullptr, accumulate);
  CHECK(rel_err(dxg, dx_ref) < 1e-4);
  CHECK(rel_err(dwg, dw_ref) < 1e-4);
  if (bias) CHECK(rel_err(dbg, db_ref) < 1e-4);

  if (deterministic) {  // a second backward gives bitwise the same gradients
    Tensor dx2 = Tensor::empty(x.shape(), DType::f32, Device::cuda);
    Tensor dw2 = gpu(dw0), db2 = gpu(db0);
    conv2d_backward(gc, sh, xg, wg, dyg, &dx2, dw2, bias ? &db2 : nullptr, accumulate);
    CHECK(bit_equal(dx2, host(dxg)));
    CHECK(bit_equal(dw2, host(dwg)));
  }
}

}  // namespace

TEST_CASE("conv2d on the GPU matches the CPU (rel 1e-4)", "[gpu_ops][conv2d]") {
  Conv2dShape a{2, 3, 9, 9, 4, 3, 3, 1, 1};      // 3x3 same padding, with bias
  Conv2dShape b{2, 8, 8, 8, 6, 3, 3, 2, 1};      // 3x3 stride 2 (ResNet down-sampling block)
  Conv2dShape c{3, 16, 8, 8, 32, 1, 1, 2, 0};    // 1x1 stride 2 shortcut
  Conv2dShape d{4, 64, 16, 16, 64, 3, 3, 1, 1};  // a ResNet-18 CIFAR body layer (Winograd/FFT candidates)
  for (bool det : {false, true}) {
    conv_case(a, true, false, det, 10);
    conv_case(a, true, true, det, 20);
    conv_case(b, false, false, det, 30);
    conv_case(c, false, true, det, 40);
    conv_case(d, false, false, det, 50);
  }
}

TEST_CASE("conv2d without a data gradient leaves dx alone and still gives dw", "[gpu_ops][conv2d]") {
  Conv2dShape sh{2, 3, 6, 6, 4, 3, 3, 1, 1};
  Tensor x = randn({2, 3, 6, 6}, 1), w = randn({4, 3, 3, 3}, 2), dy = randn({2, 4, 6, 6}, 3);
  OpCachePtr cc, gc;
  Tensor dw_ref = Tensor::empty(w.shape());
  cpu::conv2d_backward(cc, sh, x, w, dy, nullptr, dw_ref, nullptr, false);
  Tensor dwg = Tensor::empty(w.shape(), DType::f32, Device::cuda);
  cuda::conv2d_backward(gc, sh, gpu(x), gpu(w), gpu(dy), nullptr, dwg, nullptr, false);
  CHECK(rel_err(dwg, dw_ref) < 1e-4);
}

TEST_CASE("conv2d rejects a CPU tensor and a wrong shape", "[gpu_ops][conv2d]") {
  Conv2dShape sh{1, 1, 4, 4, 1, 3, 3, 1, 1};
  OpCachePtr gc;
  Tensor xg = gpu(randn({1, 1, 4, 4}, 1)), w = randn({1, 1, 3, 3}, 2);
  Tensor yg = Tensor::empty({1, 1, 4, 4}, DType::f32, Device::cuda);
  CHECK_THROWS_AS(cuda::conv2d_forward(gc, sh, xg, w, nullptr, yg), RuntimeError);  // w on the CPU
  Tensor ybad = Tensor::empty({1, 1, 3, 3}, DType::f32, Device::cuda);
  CHECK_THROWS_AS(cuda::conv2d_forward(gc, sh, xg, gpu(w), nullptr, ybad), RuntimeError);
}

TEST_CASE("linear on the GPU matches the CPU (rel 1e-4)", "[gpu_ops][linear]") {
  for (bool acc : {false, true}) {
    LinearShape sh{7, 33, 10};
    INFO("accumulate " << acc);
    Tensor x = randn({7, 33}, 1), w = randn({10, 33}, 2, 0.f, 0.2f), b = randn({10}, 3), dy = randn({7, 10}, 4);
    Tensor dw0 = randn({10, 33}, 5), db0 = randn({10}, 6);
    OpCachePtr cc, gc;
    Tensor y_ref = Tensor::empty({7, 10});
    cpu::linear_forward(cc, sh, x, w, &b, y_ref);
    Tensor xg = gpu(x), wg = gpu(w), bg = gpu(b);
    Tensor yg = Tensor::empty({7, 10}, DType::f32, Device::cuda);
    linear_forward(gc, sh, xg, wg, &bg, yg);
    CHECK(rel_err(yg, y_ref) < 1e-4);
    Tensor dx_ref = Tensor::empty({7, 33}), dw_ref = Tensor::empty({10, 33}), db_ref = Tensor::empty({10});
    dw_ref.copy_from(dw0);
    db_ref.copy_from(db0);
    cpu::linear_backward(cc, sh, x, w, dy, &dx_ref, dw_ref, &db_ref, acc);
    Tensor dxg = Tensor::empty({7, 33}, DType::f32, Device::cuda), dwg = gpu(dw0), dbg = gpu(db0);
    linear_backward(gc, sh, xg, wg, gpu(dy), &dxg, dwg, &dbg, acc);
    CHECK(rel_err(dxg, dx_ref) < 1e-4);
    CHECK(rel_err(dwg, dw_ref) < 1e-4);
    CHECK(rel_err(dbg, db_ref) < 1e-4);
  }
}

TEST_CASE("batchnorm2d on the GPU matches the CPU, PyTorch running statistics", "[gpu_ops][batchnorm]") {
  BatchNormShape sh{4, 5, 6, 7, 1e-5f, 0.1f};
  const std::vector<int64_t> xs{4, 5, 6, 7};
  Tensor x = randn(xs, 1, 0.5f, 2.f), gamma = randn({5}, 2, 1.f, 0.1f), beta = randn({5}, 3);
  Tensor rm = randn({5}, 4, 0.f, 0.1f), rv = randn({5}, 5, 1.f, 0.05f);
  OpCachePtr cc, gc;
  Tensor y_ref = Tensor::empty(xs), sm_ref = Tensor::empty({5}), si_ref = Tensor::empty({5});
  Tensor rm_ref = Tensor::empty({5}), rv_ref = Tensor::empty({5});
  rm_ref.copy_from(rm);
  rv_ref.copy_from(rv);
  cpu::batchnorm2d_forward_train(cc, sh, x, gamma, beta, y_ref, rm_ref, rv_ref, sm_ref, si_ref);
  Tensor xg = gpu(x), gg = gpu(gamma), bg = gpu(beta), rmg = gpu(rm), rvg = gpu(rv);
  Tensor yg = Tensor::empty(xs, DType::f32, Device::cuda);
  Tensor smg = Tensor::empty({5}, DType::f32, Device::cuda), sig = Tensor::empty({5}, DType::f32, Device::cuda);
  batchnorm2d_forward_train(gc, sh, xg, gg, bg, yg, rmg, rvg, smg, sig);
  CHECK(rel_err(yg, y_ref) < 1e-4);
  CHECK(rel_err(smg, sm_ref) < 1e-5);
  CHECK(rel_err(sig, si_ref) < 1e-5);
  CHECK(rel_err(rmg, rm_ref) < 1e-5);
  CHECK(rel_err(rvg, rv_ref) < 1e-5);  // unbiased variance in the running average, as PyTorch

  Tensor yi_ref = Tensor::empty(xs);
  cpu::batchnorm2d_forward_infer(cc, sh, x, gamma, beta, rm_ref, rv_ref, yi_ref);
  Tensor yig = Tensor::empty(xs, DType::f32, Device::cuda);
  batchnorm2d_forward_infer(gc, sh, xg, gg, bg, rmg, rvg, yig);
  CHECK(rel_err(yig, yi_ref) < 1e-4);

  for (bool acc : {false, true}) {
    INFO("accumulate " << acc);
    Tensor dy = randn(xs, 6), dg0 = randn({5}, 7), db0 = randn({5}, 8);
    Tensor dx_ref = Tensor::empty(xs), dg_ref = Tensor::empty({5}), db_ref = Tensor::empty({5});
    dg_ref.copy_from(dg0);
    db_ref.copy_from(db0);
    cpu::batchnorm2d_backward(cc, sh, x, dy, gamma, sm_ref, si_ref, dx_ref, dg_ref, db_ref, acc);
    Tensor dxg = Tensor::empty(xs, DType::f32, Device::cuda), dgg = gpu(dg0), dbg = gpu(db0);
    batchnorm2d_backward(gc, sh, xg, gpu(dy), gg, smg, sig, dxg, dgg, dbg, acc);
    CHECK(rel_err(dxg, dx_ref) < 1e-4);
    CHECK(rel_err(dgg, dg_ref) < 1e-4);
    CHECK(rel_err(dbg, db_ref) < 1e-4);
  }
}

TEST_CASE("maxpool2d on the GPU equals the CPU bitwise, padding acting as -inf", "[gpu_ops][pool]") {
  for (PoolShape sh : {PoolShape{2, 3, 9, 9, 3, 2, 1}, PoolShape{2, 3, 8, 8, 2, 2, 0}}) {
    INFO("kernel " << sh.kernel << " stride " << sh.stride << " pad " << sh.pad);
    // All inputs negative: a padded zero would win every border window if padding were not -inf.
    Tensor x = randn({sh.n, sh.c, sh.h, sh.w}, 11, -3.f, 0.5f);
    Tensor dy = randn({sh.n, sh.c, sh.p(), sh.q()}, 12);
    OpCachePtr cc, gc;
    Tensor y_ref = Tensor::empty({sh.n, sh.c, sh.p(), sh.q()}), dx_ref = Tensor::empty(x.shape());
    cpu::maxpool2d_forward(cc, sh, x, y_ref);
    cpu::maxpool2d_backward(cc, sh, x, y_ref, dy, dx_ref);
    Tensor xg = gpu(x), yg = Tensor::empty(y_ref.shape(), DType::f32, Device::cuda);
    Tensor dxg = Tensor::empty(x.shape(), DType::f32, Device::cuda);
    maxpool2d_forward(gc, sh, xg, yg);
    maxpool2d_backward(gc, sh, xg, yg, gpu(dy), dxg);
    CHECK(bit_equal(yg, y_ref));
    CHECK(bit_equal(dxg, dx_ref));
  }
}

TEST_CASE("global average pool on the GPU matches the CPU (rel 1e-6)", "[gpu_ops][pool]") {
  Tensor x = randn({3, 5, 4, 4}, 1), dy = randn({3, 5}, 2);
  OpCachePtr cc, gc;
  Tensor y_ref = Tensor::empty({3, 5}), dx_ref = Tensor::empty({3, 5, 4, 4});
  cpu::global_avgpool_forward(cc, x, y_ref);
  cpu::global_avgpool_backward(cc, dy, dx_ref);
  Tensor yg = Tensor::empty({3, 5}, DType::f32, Device::cuda), dxg = Tensor::empty({3, 5, 4, 4}, DType::f32, Device::cuda);
  global_avgpool_forward(gc, gpu(x), yg);
  global_avgpool_backward(gc, gpu(dy), dxg);
  CHECK(rel_err(yg, y_ref) < 1e-6);
  CHECK(rel_err(dxg, dx_ref) < 1e-6);
}

TEST_CASE("element-wise ops on the GPU equal the CPU bitwise", "[gpu_ops][elementwise]") {
  const std::vector<int64_t> s{3, 1000, 7};
  Tensor a = randn(s, 1), b = randn(s, 2), dy = randn(s, 3);
  Tensor r_ref = Tensor::empty(s), dr_ref = Tensor::empty(s), add_ref = Tensor::empty(s);
  cpu::relu_forward(a, r_ref);
  cpu::relu_backward(r_ref, dy, dr_ref);
  cpu::add_forward(a, b, add_ref);
  Tensor ag = gpu(a), bg = gpu(b);
  Tensor rg = Tensor::empty(s, DType::f32, Device::cuda), drg = Tensor::empty(s, DType::f32, Device::cuda);
  Tensor addg = Tensor::empty(s, DType::f32, Device::cuda);
  relu_forward(ag, rg);
  relu_backward(rg, gpu(dy), drg);
  add_forward(ag, bg, addg);
  CHECK(bit_equal(rg, r_ref));
  CHECK(bit_equal(drg, dr_ref));
  CHECK(bit_equal(addg, add_ref));

  Tensor inplace_ref = Tensor::empty(s);
  inplace_ref.copy_from(a);
  cpu::add_inplace(inplace_ref, b);
  cpu::scale_inplace(inplace_ref, 0.37f);
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
  CHECK(cpu::count_nonfinite(x) == 10);
  CHECK(count_nonfinite(gpu(x)) == 10);
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
      const double loss_ref = cpu::softmax_xent_forward(z, lab, eps, p_ref, &right_ref);
      cpu::softmax_xent_backward(p_ref, lab, eps, 0.5f, d_ref);
      Tensor zg = gpu(z), lg = gpu(lab);
      Tensor pg = Tensor::empty({n, k}, DType::f32, Device::cuda), dg = Tensor::empty({n, k}, DType::f32, Device::cuda);
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
  try {
    Tensor t = Tensor::empty({int64_t{1} << 50}, DType::u8, Device::cuda);  // 1 PiB
    FAIL("a 1 PiB allocation succeeded");
  } catch (const RuntimeError& e) {
    const std::string m = e.what();
    INFO(m);
    CHECK(m.find("out of memory") != std::string::npos);
    CHECK(m.find("layer3.1.conv2") != std::string::npos);
    CHECK(m.find(std::to_string(int64_t{1} << 50) + " bytes") != std::string::npos);
    CHECK(m.find("accumulation_steps") != std::string::npos);
    CHECK(m.find("bf16") != std::string::npos);
  }
  // The allocator still works afterwards.
  Tensor ok = Tensor::zeros({1024}, DType::f32, Device::cuda);
  CHECK(count_nonfinite(ok) == 0);
  CHECK(cuda::memory_stats().used_bytes >= 4096);
}
