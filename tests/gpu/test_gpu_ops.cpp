// Element-wise ops, sgd_update, softmax cross-entropy and the allocator's out-of-memory message: the
// CUDA halves against the CPU halves (fp32).
// Inputs are seeded random normals (never zeros); every output starts as NaN (gputest::poisoned) so
// an element an op forgets to write fails the check; parameter gradients start as random values, so
// overwrite (beta 0) vs accumulate (beta 1) is checked both ways. Tolerances are relative to the
// largest reference magnitude (gputest::rel_err) and stated per op.
//  - ReLU, add, scale (no arithmetic beyond one rounding): bitwise equal.
//  - sgd_update: 1e-6 (the same element math; FMA contraction on the GPU only).
//  - softmax cross-entropy: 1e-6 (same arithmetic, other summation order).
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "cuda/allocator.hpp"
#include "cuda/cuda_context.hpp"
#include "src/ops/elementwise.hpp"
#include "src/ops/sgd_update.hpp"
#include "src/ops/softmax_xent.hpp"
#include "tests/gpu/gpu_test_util.hpp"

using namespace ht;
using namespace ht::gputest;

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
    CHECK(m.find("train.precision = bf16") != std::string::npos);
    CHECK(m.find("refused") == std::string::npos);
  }
  // The allocator still works afterwards.
  Tensor ok = Tensor::zeros({1024}, DType::f32, Device::cuda);
  CHECK(count_nonfinite(ok) == 0);
  CHECK(cuda::memory_stats().used_bytes >= 4096);
}
