// Softmax cross-entropy with label smoothing: the double reference and the CPU implementation
// against central finite differences, the CPU implementation against the reference (loss, probs,
// top-1 count, gradients), numerical stability on huge logits, and values from PyTorch 1.13.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "src/ops/softmax_xent.hpp"
#include "src/ops/softmax_xent_ref.hpp"
#include "tests/unit/gradcheck.hpp"
#include "tests/unit/tensor_test_util.hpp"

using namespace ht;
using namespace ht::test;

namespace {

Tensor labels_tensor(const std::vector<int32_t>& v) {
  auto t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::i32);
  std::copy(v.begin(), v.end(), t.span<int32_t>().begin());
  return t;
}

}  // namespace

TEST_CASE("softmax xent backward matches finite differences", "[softmax_xent][gradcheck]") {
  const int n = 4, k = 7;
  const std::vector<int32_t> labels{3, 0, 6, 3};
  const auto z = round_to_float(random_vec(n * k, 11, -3, 3));
  for (double eps : {0.0, 0.1, 0.3}) {
    for (double scale : {1.0, 0.25}) {
      CAPTURE(eps, scale);
      // f(z) = scale * mean loss; its gradient is the backward with that scale.
      const auto num = numeric_grad(
          [&](const std::vector<double>& v) {
            std::vector<double> p(v.size());
            return scale * ref::softmax_xent_forward(v.data(), labels.data(), n, k, eps, p.data(), nullptr);
          },
          z);
      std::vector<double> p(z.size()), d(z.size());
      ref::softmax_xent_forward(z.data(), labels.data(), n, k, eps, p.data(), nullptr);
      ref::softmax_xent_backward(p.data(), labels.data(), n, k, eps, scale, d.data());
      CHECK(max_rel_err(d, num) < 1e-8);

      auto tz = to_tensor(z, {n, k}), tp = Tensor::empty({n, k}), td = Tensor::empty({n, k});
      auto tl = labels_tensor(labels);
      softmax_xent_forward_cpu(tz, tl, static_cast<float>(eps), tp, nullptr);
      softmax_xent_backward_cpu(tp, tl, static_cast<float>(eps), static_cast<float>(scale), td);
      CHECK(max_rel_err(to_vec(td), num) < 1e-6);
    }
  }
}

TEST_CASE("softmax xent CPU matches the reference", "[softmax_xent]") {
  const int n = 300, k = 10;  // 3000 elements per call; a larger batch takes the threaded path
  for (int rows : {n, 4000}) {
    std::vector<int32_t> labels(rows);
    for (int i = 0; i < rows; ++i) labels[i] = (i * 7 + 3) % k;
    const auto z = round_to_float(random_vec(static_cast<size_t>(rows) * k, 21 + rows, -5, 5));
    for (float eps : {0.f, 0.1f}) {
      CAPTURE(rows, eps);
      std::vector<double> p(z.size()), d(z.size());
      int64_t right_ref = -1;
      const double loss_ref = ref::softmax_xent_forward(z.data(), labels.data(), rows, k, double(eps), p.data(), &right_ref);
      ref::softmax_xent_backward(p.data(), labels.data(), rows, k, double(eps), 0.5, d.data());
      auto tz = to_tensor(z, {rows, k}), tp = Tensor::empty({rows, k}), tl = labels_tensor(labels);
      int64_t right = -1;
      const double loss = softmax_xent_forward_cpu(tz, tl, eps, tp, &right);
      CHECK(std::abs(loss - loss_ref) < 1e-6 * std::abs(loss_ref));
      CHECK(right == right_ref);
      CHECK(right > 0);
      CHECK(max_rel_err(to_vec(tp), p) < 1e-6);
      softmax_xent_backward_cpu(tp, tl, eps, 0.5f, tp);  // dlogits aliases probs
      CHECK(max_rel_err(to_vec(tp), d) < 1e-8);           // |d| ~ 1/N: absolute 1e-8
    }
  }
}

TEST_CASE("softmax xent is stable on huge logits and counts top-1", "[softmax_xent]") {
  // Row 0: label is the huge maximum (loss ~ 0, correct); row 1: label far below (loss ~ 2000).
  auto tz = to_tensor({1000, 0, -1000, -1000, 1000, 0}, {2, 3}), tp = Tensor::empty({2, 3});
  auto tl = labels_tensor({0, 0});
  int64_t right = -1;
  const double loss = softmax_xent_forward_cpu(tz, tl, 0.f, tp, &right);
  CHECK(std::isfinite(loss));
  CHECK(loss == Approx((0.0 + 2000.0) / 2).epsilon(1e-6));
  CHECK(right == 1);
  for (double v : to_vec(tp)) CHECK(std::isfinite(v));
  // Label smoothing eps over K=3: row 0 adds eps*(lse - mean z) = eps*(1000 - 0) to the loss.
  const double ls = softmax_xent_forward_cpu(tz, tl, 0.3f, tp, nullptr);
  const double expect_row0 = 0.3f * 1000.0, expect_row1 = 2000.0 - 0.3f * (2000.0 - 1000.0);
  CHECK(ls == Approx((expect_row0 + expect_row1) / 2).epsilon(1e-6));
  // A label outside [0, K) is an error, not an out-of-bounds read.
  auto bad = labels_tensor({0, 3});
  CHECK_THROWS_AS(softmax_xent_forward(tz, bad, 0.f, tp, nullptr), RuntimeError);
}

// Fixture computed with PyTorch 1.13 (float64):
//   z[j][i] = 3*sin(1.1*(5j+i)+0.5), 3x5; labels [2, 0, 4]
//   l = F.cross_entropy(z, labels, label_smoothing=eps); l.backward()  for eps in (0, 0.1)
TEST_CASE("softmax xent matches PyTorch F.cross_entropy", "[softmax_xent][torch]") {
  const double loss0 = 3.36683130115242, loss1 = 3.32933188777483;
  const std::vector<double> grad0{0.049999803134,   0.238045840296,  -0.290561401337, 0.00189301118242,
                                  0.00062274672388, -0.328127228677, 0.107231014846,  0.202404885313,
                                  0.0174867189301,  0.00100460958836, 0.000875850631251, 0.0133921129905,
                                  0.183398436763,   0.128837640558,  -0.326504040943};
  const std::vector<double> grad1{0.0433331364673,  0.23137917363,    -0.26389473467,   -0.00477365548424,
                                  -0.00604391994279, -0.30146056201,   0.100564348179,   0.195738218646,
                                  0.0108200522634,  -0.0056620570783, -0.00579081603542, 0.00672544632381,
                                  0.176731770096,   0.122170973892,   -0.299837374276};
  std::vector<double> z(15);
  for (int i = 0; i < 15; ++i) z[i] = 3 * std::sin(1.1 * i + 0.5);
  auto tz = to_tensor(z, {3, 5}), tp = Tensor::empty({3, 5}), td = Tensor::empty({3, 5});
  auto tl = labels_tensor({2, 0, 4});
  int64_t right = -1;
  CHECK(softmax_xent_forward_cpu(tz, tl, 0.f, tp, &right) == Approx(loss0).epsilon(1e-6));
  CHECK(right == 0);  // torch argmax rows: [1, 2, 2]
  softmax_xent_backward_cpu(tp, tl, 0.f, 1.f, td);
  CHECK(max_rel_err(to_vec(td), grad0) < 1e-6);
  CHECK(softmax_xent_forward_cpu(tz, tl, 0.1f, tp, nullptr) == Approx(loss1).epsilon(1e-6));
  softmax_xent_backward_cpu(tp, tl, 0.1f, 1.f, td);
  CHECK(max_rel_err(to_vec(td), grad1) < 1e-6);
}
