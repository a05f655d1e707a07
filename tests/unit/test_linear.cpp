// linear: the naive reference's backward against central finite differences (double), then the
// oneDNN CPU implementation (linear_forward_cpu, linear_backward_cpu) against the reference on the same
// float inputs.
#include <catch2/catch.hpp>

#include <vector>

#include "src/ops/linear.hpp"
#include "src/ops/linear_ref.hpp"
#include "tests/unit/weighted_op_test_util.hpp"

using namespace ht;
using namespace ht::test;

namespace {

LinearShape lshape(int n, int in, int out) {
  LinearShape s;
  s.n = n, s.in = in, s.out = out;
  return s;
}

using Data = WeightedOpCase<LinearShape>;
using Result = WeightedOpResult;

}  // namespace

TEST_CASE("linear reference backward matches finite differences", "[linear][ref]") {
  for (bool bias : {true, false}) {
    for (auto sh : {lshape(3, 5, 4), lshape(1, 7, 2)}) {
      const auto x = random_vec(size_t(sh.n) * sh.in, 21), w = random_vec(size_t(sh.out) * sh.in, 22);
      const auto b = random_vec(size_t(sh.out), 23), g = random_vec(size_t(sh.n) * sh.out, 24);
      auto f = [&](const std::vector<double>& xx, const std::vector<double>& ww, const std::vector<double>& bb) {
        std::vector<double> y(size_t(sh.n) * sh.out);
        ref::linear_forward<double>(sh, xx.data(), ww.data(), bias ? bb.data() : nullptr, y.data());
        return ht::test::dot(g, y);
      };
      std::vector<double> dx(x.size()), dw(w.size()), db(b.size());
      ref::linear_backward<double>(sh, x.data(), w.data(), g.data(), dx.data(), dw.data(), bias ? db.data() : nullptr);
      CHECK(max_rel_err(dx, numeric_grad([&](const std::vector<double>& v) { return f(v, w, b); }, x)) < 1e-7);
      CHECK(max_rel_err(dw, numeric_grad([&](const std::vector<double>& v) { return f(x, v, b); }, w)) < 1e-7);
      if (bias) CHECK(max_rel_err(db, numeric_grad([&](const std::vector<double>& v) { return f(x, w, v); }, b)) < 1e-7);
    }
  }
}

TEST_CASE("linear oneDNN forward and backward match the reference", "[linear][cpu]") {
  for (bool bias : {true, false})
    for (auto sh : {lshape(3, 5, 4), lshape(1, 7, 2), lshape(64, 3136, 128), lshape(128, 512, 10), lshape(5, 128, 10)}) {
      Data d(sh, 500);
      OpCachePtr cache;
      compare(run_cpu(cache, d, bias, true), run_ref(d, bias, true));
    }
}

TEST_CASE("linear oneDNN: dx == nullptr and accumulate", "[linear][cpu]") {
  const auto sh = lshape(8, 33, 17);
  Data d(sh, 600);
  OpCachePtr cache;
  const auto got = run_cpu(cache, d, true, false);
  CHECK(got.dx.empty());
  compare(got, run_ref(d, true, false));

  auto x = to_tensor(d.x, {sh.n, sh.in}), w = to_tensor(d.w, {sh.out, sh.in}), dy = to_tensor(d.dy, {sh.n, sh.out});
  const auto dw0 = round_to_float(random_vec(size_t(sh.out) * sh.in, 601));
  const auto db0 = round_to_float(random_vec(size_t(sh.out), 602));
  auto dw = to_tensor(dw0, {sh.out, sh.in}), db = to_tensor(db0, {sh.out});
  linear_backward_cpu(cache, sh, x, w, dy, nullptr, dw, &db, true);
  for (size_t i = 0; i < dw0.size(); ++i) REQUIRE(dw.span<float>()[i] == static_cast<float>(dw0[i]) + static_cast<float>(got.dw[i]));
  for (size_t i = 0; i < db0.size(); ++i) REQUIRE(db.span<float>()[i] == static_cast<float>(db0[i]) + static_cast<float>(got.db[i]));
}

TEST_CASE("linear oneDNN: one cache across shape changes rebuilds correctly", "[linear][cpu]") {
  OpCachePtr cache;
  const std::vector<std::pair<LinearShape, bool>> seq = {
      {lshape(16, 40, 10), true}, {lshape(7, 40, 10), true}, {lshape(7, 40, 10), false},
      {lshape(4, 9, 30), true},   {lshape(16, 40, 10), true}};
  uint32_t seed = 700;
  for (const auto& [sh, bias] : seq) {
    Data d(sh, seed += 10);
    compare(run_cpu(cache, d, bias, true), run_ref(d, bias, true));
  }
}

TEST_CASE("linear oneDNN: mismatched tensors throw RuntimeError", "[linear][cpu]") {
  const auto sh = lshape(2, 3, 4);
  OpCachePtr cache;
  auto x = Tensor::zeros({2, 3}), w = Tensor::zeros({4, 3}), y = Tensor::zeros({2, 4}), bad = Tensor::zeros({3, 4});
  CHECK_NOTHROW(linear_forward_cpu(cache, sh, x, w, nullptr, y));
  CHECK_THROWS_AS(linear_forward(cache, sh, x, bad, nullptr, y), RuntimeError);
}

// ---- Benchmark (hidden: run with `ht_unit_tests "[.bench]"`, OMP_NUM_THREADS=1) ----------------
// One CSV line per shape: median wall and minimum process-CPU forward and backward (dx, dw, db) ms.
// scripts/bench/ops_bench.py runs the same shapes in PyTorch.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>

TEST_CASE("linear oneDNN benchmark", "[.bench][linear_bench]") {
  const int nb = std::getenv("HT_BENCH_BATCH") ? std::atoi(std::getenv("HT_BENCH_BATCH")) : 128;
  const int reps = std::getenv("HT_BENCH_REPS") ? std::atoi(std::getenv("HT_BENCH_REPS")) : 20;
  struct B {
    const char* name;
    LinearShape sh;
  };
  const std::vector<B> shapes = {{"fmnist_fc1_3136_128", lshape(64, 3136, 128)},
                                 {"fmnist_fc2_128_10", lshape(64, 128, 10)},
                                 {"r18_fc_512_10", lshape(nb, 512, 10)}};
  auto cpu_ms = [] {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
  };
  std::printf("op,shape,n,fwd_ms,bwd_ms,fwd_cpu_min_ms,bwd_cpu_min_ms\n");
  for (const auto& b : shapes) {
    const auto& s = b.sh;
    Data d(s, 1);
    auto x = to_tensor(d.x, {s.n, s.in}), w = to_tensor(d.w, {s.out, s.in}), bias = to_tensor(d.b, {s.out});
    auto dy = to_tensor(d.dy, {s.n, s.out});
    auto y = Tensor::empty({s.n, s.out}), dx = Tensor::empty({s.n, s.in}), dw = Tensor::empty({s.out, s.in});
    auto db = Tensor::empty({s.out});
    OpCachePtr cache;
    std::vector<double> tf, tb, cf, cb;
    for (int i = 0; i < reps + 1; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      const double c0 = cpu_ms();
      linear_forward_cpu(cache, s, x, w, &bias, y);
      auto t1 = std::chrono::steady_clock::now();
      const double c1 = cpu_ms();
      linear_backward_cpu(cache, s, x, w, dy, &dx, dw, &db, false);
      auto t2 = std::chrono::steady_clock::now();
      const double c2 = cpu_ms();
      if (i == 0) continue;
      tf.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      tb.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
      cf.push_back(c1 - c0);
      cb.push_back(c2 - c1);
    }
    std::sort(tf.begin(), tf.end());
    std::sort(tb.begin(), tb.end());
    std::printf("linear,%s,%d,%.3f,%.3f,%.3f,%.3f\n", b.name, s.n, tf[tf.size() / 2], tb[tb.size() / 2],
                *std::min_element(cf.begin(), cf.end()), *std::min_element(cb.begin(), cb.end()));
    std::fflush(stdout);
  }
}

TEST_CASE("linear dispatchers check the shape first, then each tensor (weighted_op_args, op.hpp)", "[linear]") {
  OpCachePtr cache;
  Tensor x = Tensor::zeros({2, 3}, DType::f32, Device::cpu), w = Tensor::zeros({4, 3}, DType::f32, Device::cpu);
  Tensor y = Tensor::zeros({2, 4}, DType::f32, Device::cpu), b = Tensor::zeros({4}, DType::f32, Device::cpu);
  REQUIRE_THROWS_WITH(linear_forward(cache, lshape(0, 3, 4), x, w, &b, y),
                      Catch::Contains("linear_forward") && Catch::Contains("invalid shape N=0 in=3 out=4"));
  Tensor bad_b = Tensor::zeros({3}, DType::f32, Device::cpu);
  REQUIRE_THROWS_WITH(linear_forward(cache, lshape(2, 3, 4), x, w, &bad_b, y), Catch::Contains(": b"));
  Tensor dw = Tensor::zeros({4, 3}, DType::f32, Device::cpu), bad_dx = Tensor::zeros({2, 4}, DType::f32, Device::cpu);
  REQUIRE_THROWS_WITH(linear_backward(cache, lshape(2, 3, 4), x, w, y, &bad_dx, dw, nullptr, false),
                      Catch::Contains("linear_backward") && Catch::Contains(": dx"));
  linear_forward(cache, lshape(2, 3, 4), x, w, &b, y);  // valid: no throw
  REQUIRE(y.data<float>()[0] == 0.0f);
}
