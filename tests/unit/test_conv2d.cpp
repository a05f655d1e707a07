// conv2d: the naive reference's backward against central finite differences (double), then the
// oneDNN CPU implementation (conv2d_forward_cpu, conv2d_backward_cpu) against the reference on the same
// float inputs.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "src/ops/conv2d.hpp"
#include "src/ops/conv2d_ref.hpp"
#include "tests/unit/weighted_op_test_util.hpp"

using namespace ht;
using namespace ht::test;

namespace {

struct Case {
  const char* name;
  Conv2dShape sh;
  bool bias;
};

Conv2dShape shape(int n, int c, int h, int w, int k, int r, int s, int stride, int pad) {
  Conv2dShape sh;
  sh.n = n, sh.c = c, sh.h = h, sh.w = w, sh.k = k, sh.r = r, sh.s = s, sh.stride = stride, sh.pad = pad;
  return sh;
}

// Small shapes for the finite-difference checks (and the oneDNN comparison).
const std::vector<Case> kSmall = {
    {"3x3 s1 p1 bias", shape(2, 3, 5, 4, 4, 3, 3, 1, 1), true},
    {"3x3 s1 p0 nobias", shape(2, 3, 6, 5, 2, 3, 3, 1, 0), false},
    {"3x3 s2 p1 nobias non-square", shape(2, 2, 7, 6, 3, 3, 3, 2, 1), false},
    {"3x3 s2 p0 bias (last row/col unused)", shape(1, 2, 6, 7, 3, 3, 3, 2, 0), true},
    {"1x1 s1 p0 bias", shape(2, 4, 3, 5, 3, 1, 1, 1, 0), true},
    {"1x1 s2 p0 nobias (shortcut)", shape(2, 4, 5, 4, 3, 1, 1, 2, 0), false},
    {"3x1 s1 p1 bias (R != S)", shape(1, 2, 4, 5, 2, 3, 1, 1, 1), true},
    {"7x7 s2 p3 nobias (stem)", shape(1, 3, 9, 8, 2, 7, 7, 2, 3), false},
};

size_t nx(const Conv2dShape& s) { return size_t(s.n) * s.c * s.h * s.w; }
size_t nw(const Conv2dShape& s) { return size_t(s.k) * s.c * s.r * s.s; }
size_t ny(const Conv2dShape& s) { return size_t(s.n) * s.k * s.p() * s.q(); }

using Data = WeightedOpCase<Conv2dShape>;
using Result = WeightedOpResult;

}  // namespace

TEST_CASE("conv2d reference backward matches finite differences", "[conv2d][ref]") {
  for (const auto& c : kSmall) {
    SECTION(c.name) {
      const auto& sh = c.sh;
      const auto x = random_vec(nx(sh), 11), w = random_vec(nw(sh), 12), b = random_vec(size_t(sh.k), 13);
      const auto g = random_vec(ny(sh), 14);  // f = sum g * y, so df/dy = g
      auto f = [&](const std::vector<double>& xx, const std::vector<double>& ww, const std::vector<double>& bb) {
        std::vector<double> y(ny(sh));
        ref::conv2d_forward<double>(sh, xx.data(), ww.data(), c.bias ? bb.data() : nullptr, y.data());
        return ht::test::dot(g, y);
      };
      std::vector<double> dx(nx(sh)), dw(nw(sh)), db(size_t(sh.k));
      ref::conv2d_backward<double>(sh, x.data(), w.data(), g.data(), dx.data(), dw.data(), c.bias ? db.data() : nullptr);
      const auto ndx = numeric_grad([&](const std::vector<double>& v) { return f(v, w, b); }, x);
      const auto ndw = numeric_grad([&](const std::vector<double>& v) { return f(x, v, b); }, w);
      CHECK(max_rel_err(dx, ndx) < 1e-7);
      CHECK(max_rel_err(dw, ndw) < 1e-7);
      if (c.bias) {
        const auto ndb = numeric_grad([&](const std::vector<double>& v) { return f(x, w, v); }, b);
        CHECK(max_rel_err(db, ndb) < 1e-7);
      }
      // Sanity: the gradients are not trivially zero.
      CHECK(*std::max_element(dw.begin(), dw.end()) > 1e-3);
    }
  }
}

TEST_CASE("conv2d oneDNN forward and backward match the reference", "[conv2d][cpu]") {
  std::vector<Case> cases = kSmall;
  cases.push_back({"ResNet-ish 3x3 s1 p1 64->64 8x8", shape(4, 64, 8, 8, 64, 3, 3, 1, 1), false});
  cases.push_back({"ResNet-ish 3x3 s2 p1 32->48 9x9", shape(2, 32, 9, 9, 48, 3, 3, 2, 1), false});
  cases.push_back({"stem 3x3 s1 p1 3->16 bias", shape(2, 3, 8, 8, 16, 3, 3, 1, 1), true});
  // ResNet-18/CIFAR's deeper fast-path shapes (checked plan, src/ops/conv2d.cpp).
  cases.push_back({"ResNet-18 layer2 3x3 128->128 16x16", shape(2, 128, 16, 16, 128, 3, 3, 1, 1), false});
  cases.push_back({"ResNet-18 layer3 3x3 256->256 8x8", shape(2, 256, 8, 8, 256, 3, 3, 1, 1), false});
  cases.push_back({"ResNet-18 layer4 3x3 512->512 4x4", shape(4, 512, 4, 4, 512, 3, 3, 1, 1), false});
  for (const auto& c : cases) {
    SECTION(c.name) {
      Data d(c.sh, 100);
      OpCachePtr cache;
      // The error of a float32 sum grows with the square root of its length, as do its values
      // (the tolerance is absolute for |values| below 1): the 1e-4 holds up to 576 products.
      const double terms = double(c.sh.c) * c.sh.r * c.sh.s;
      compare(run_cpu(cache, d, c.bias, true), run_ref(d, c.bias, true),
              kWeightedOpTol * std::max(1.0, std::sqrt(terms / 576)));
    }
  }
}

TEST_CASE("conv2d oneDNN: a fast path runs only for the passes its check kept", "[conv2d][cpu]") {
  // Winograd is planned for 3x3 stride-1 layers of >= 32 channels; a pass keeps it only within
  // kConvFastPathBound of direct convolution on this CPU. 1x1 and stride-2 layers are direct.
  const Conv2dCpuPlan fast = conv2d_cpu_plan(shape(2, 64, 8, 8, 64, 3, 3, 1, 1));
  for (const std::string& a : {fast.forward, fast.backward_data, fast.backward_weights})
    CHECK((a == "winograd" || a == "direct"));
  const Conv2dCpuPlan plain = conv2d_cpu_plan(shape(2, 64, 8, 8, 128, 3, 3, 2, 1));
  CHECK(plain.forward == "direct");
  CHECK(plain.backward_data == "direct");
  CHECK(plain.backward_weights == "direct");
  CHECK(conv2d_cpu_check_seconds() > 0);  // the 64->64 shape was checked
}

// Run by ctest entry conv2d_fast_path_fallback with HT_TEST_FAULTS=conv.fast_path_error=backward_data:
// the check sees a backward-data result 1e-3 off and that pass, only that one, runs direct convolution;
// the op's results still match the reference.
TEST_CASE("conv2d oneDNN: a fast path that is off falls back to direct for that pass", "[.conv_fault]") {
  const Conv2dShape sh = shape(2, 64, 8, 8, 64, 3, 3, 1, 1);
  const Conv2dCpuPlan plan = conv2d_cpu_plan(sh);
  CHECK(plan.backward_data == "direct");
  const char* algo = std::getenv("HT_CONV_ALGO");
  if (!algo || std::string(algo) == "winograd") {
    CHECK(plan.forward == "winograd");  // within the bound on every CPU tried; direct would say which
    CHECK(plan.backward_weights == "winograd");
  }
  Data d(sh, 7);
  OpCachePtr cache;
  compare(run_cpu(cache, d, false, true), run_ref(d, false, true));
}

TEST_CASE("conv2d oneDNN: dx == nullptr skips backward data, same dw/db", "[conv2d][cpu]") {
  Data d(shape(2, 3, 6, 6, 4, 3, 3, 1, 1), 200);
  OpCachePtr cache;
  const auto want = run_ref(d, true, false);
  const auto got = run_cpu(cache, d, true, false);
  CHECK(got.dx.empty());
  compare(got, want);
}

TEST_CASE("conv2d oneDNN: accumulate adds exactly into dw and db", "[conv2d][cpu]") {
  // Covers the three plans: blocked direct, Winograd (>= 64 channels) and plain GEMM (1x1).
  for (auto sh : {shape(2, 3, 6, 6, 4, 3, 3, 1, 1), shape(2, 32, 6, 6, 32, 3, 3, 1, 1), shape(2, 64, 4, 4, 64, 3, 3, 1, 1),
                  shape(2, 8, 5, 5, 16, 1, 1, 2, 0)}) {
    Data d(sh, 300);
    OpCachePtr cache;
    auto x = to_tensor(d.x, {sh.n, sh.c, sh.h, sh.w});
    auto w = to_tensor(d.w, {sh.k, sh.c, sh.r, sh.s});
    auto dy = to_tensor(d.dy, {sh.n, sh.k, sh.p(), sh.q()});
    auto y = Tensor::empty({sh.n, sh.k, sh.p(), sh.q()});
    conv2d_forward_cpu(cache, sh, x, w, nullptr, y);
    auto dw_fresh = Tensor::empty({sh.k, sh.c, sh.r, sh.s}), db_fresh = Tensor::empty({sh.k});
    conv2d_backward_cpu(cache, sh, x, w, dy, nullptr, dw_fresh, &db_fresh, false);
    const auto dw0 = round_to_float(random_vec(nw(sh), 301)), db0 = round_to_float(random_vec(size_t(sh.k), 302));
    auto dw = to_tensor(dw0, {sh.k, sh.c, sh.r, sh.s}), db = to_tensor(db0, {sh.k});
    auto dx = Tensor::empty({sh.n, sh.c, sh.h, sh.w});
    conv2d_backward_cpu(cache, sh, x, w, dy, &dx, dw, &db, true);
    auto a = dw.span<float>(), f = dw_fresh.span<float>();
    for (size_t i = 0; i < a.size(); ++i) REQUIRE(a[i] == static_cast<float>(dw0[i]) + f[i]);
    auto ab = db.span<float>(), fb = db_fresh.span<float>();
    for (size_t i = 0; i < ab.size(); ++i) REQUIRE(ab[i] == static_cast<float>(db0[i]) + fb[i]);
  }
}

TEST_CASE("conv2d oneDNN: one cache across shape changes rebuilds correctly", "[conv2d][cpu]") {
  OpCachePtr cache;
  const std::vector<std::pair<Conv2dShape, bool>> seq = {
      {shape(2, 16, 8, 8, 16, 3, 3, 1, 1), false},
      {shape(3, 16, 8, 8, 16, 3, 3, 1, 1), false},  // batch change (last, smaller batch)
      {shape(3, 16, 8, 8, 16, 3, 3, 1, 1), true},   // bias appears
      {shape(2, 3, 7, 5, 4, 3, 3, 2, 1), true},     // everything changes
      {shape(2, 16, 8, 8, 16, 3, 3, 1, 1), false},  // back to the first
  };
  uint32_t seed = 400;
  for (const auto& [sh, bias] : seq) {
    Data d(sh, seed += 10);
    compare(run_cpu(cache, d, bias, true), run_ref(d, bias, true));
  }
}

TEST_CASE("conv2d oneDNN: a cache built on one thread runs on another", "[conv2d][cpu]") {
  // The engine is process-wide and streams are per thread, so layers may move between threads.
  Data d(shape(2, 16, 6, 6, 16, 3, 3, 1, 1), 500);
  OpCachePtr cache;
  const auto want = run_ref(d, true, true);
  compare(run_cpu(cache, d, true, true), want);
  Result got;
  std::thread t([&] { got = run_cpu(cache, d, true, true); });
  t.join();
  compare(got, want);
}

TEST_CASE("conv2d oneDNN: mismatched tensors throw RuntimeError", "[conv2d][cpu]") {
  const auto sh = shape(1, 2, 5, 5, 3, 3, 3, 1, 1);
  OpCachePtr cache;
  auto x = Tensor::zeros({1, 2, 5, 5}), w = Tensor::zeros({3, 2, 3, 3}), y = Tensor::zeros({1, 3, 5, 5});
  auto bad_y = Tensor::zeros({1, 3, 4, 4}), bad_w = Tensor::zeros({3, 2, 3, 3}, DType::f64);
  CHECK_NOTHROW(conv2d_forward_cpu(cache, sh, x, w, nullptr, y));
  CHECK_THROWS_AS(conv2d_forward(cache, sh, x, w, nullptr, bad_y), RuntimeError);
  CHECK_THROWS_AS(conv2d_forward(cache, sh, x, bad_w, nullptr, y), RuntimeError);
}

// ---- Benchmark (hidden: run with `ht_unit_tests "[.bench]"`, OMP_NUM_THREADS=1) ----------------
// Prints one CSV line per shape: median wall and minimum process-CPU forward and backward
// (dx + dw [+ db]) milliseconds.
// scripts/bench/ops_bench.py runs the same shapes in PyTorch for comparison.
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>

namespace {
struct BenchShape {
  std::string name;
  Conv2dShape sh;
  bool bias, dx;
};
// Process CPU time: robust against other processes on a shared machine (1 OpenMP thread runs on
// the calling thread).
double cpu_ms() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}
double median_ms(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
}  // namespace

TEST_CASE("conv2d oneDNN benchmark", "[.bench][conv2d_bench]") {
  const int nb = std::getenv("HT_BENCH_BATCH") ? std::atoi(std::getenv("HT_BENCH_BATCH")) : 128;
  const int reps = std::getenv("HT_BENCH_REPS") ? std::atoi(std::getenv("HT_BENCH_REPS")) : 5;
  const int fb = 64;  // fmnist_cnn micro-batch
  // ResNet-18 (32x32 input): the stem, layer1's 3x3, then per later stage l (c -> k = 2c channels, size
  // hw -> hw/2) its strided first 3x3 "a", its 3x3 at the new size and its 1x1 strided shortcut "sc".
  std::vector<BenchShape> shapes = {{"r18_stem_3_64_32", shape(nb, 3, 32, 32, 64, 3, 3, 1, 1), false, false},
                                    {"r18_l1_64_64_32", shape(nb, 64, 32, 32, 64, 3, 3, 1, 1), false, true}};
  for (int l = 2, c = 64, hw = 32; l <= 4; ++l, c *= 2, hw /= 2) {
    const std::string at = "r18_l" + std::to_string(l), k = std::to_string(2 * c), cs = std::to_string(c);
    shapes.push_back({at + "a_" + cs + "_" + k + "_s2", shape(nb, c, hw, hw, 2 * c, 3, 3, 2, 1), false, true});
    shapes.push_back({at + "_" + k + "_" + k + "_" + std::to_string(hw / 2),
                      shape(nb, 2 * c, hw / 2, hw / 2, 2 * c, 3, 3, 1, 1), false, true});
    shapes.push_back({at + "sc_1x1_" + cs + "_" + k + "_s2", shape(nb, c, hw, hw, 2 * c, 1, 1, 2, 0), false, true});
  }
  shapes.push_back({"fmnist_c1_1_32_28", shape(fb, 1, 28, 28, 32, 3, 3, 1, 1), true, false});
  shapes.push_back({"fmnist_c2_32_64_14", shape(fb, 32, 14, 14, 64, 3, 3, 1, 1), true, true});
  const char* only = std::getenv("HT_BENCH_ONLY");
  std::printf("op,shape,n,fwd_ms,bwd_ms,fwd_cpu_min_ms,bwd_cpu_min_ms\n");
  for (const auto& b : shapes) {
    if (only && b.name.find(only) == std::string::npos) continue;
    const auto& s = b.sh;
    auto x = to_tensor(random_vec(nx(s), 1), {s.n, s.c, s.h, s.w});
    auto w = to_tensor(random_vec(nw(s), 2), {s.k, s.c, s.r, s.s});
    auto bias = to_tensor(random_vec(size_t(s.k), 3), {s.k});
    auto dy = to_tensor(random_vec(ny(s), 4), {s.n, s.k, s.p(), s.q()});
    auto y = Tensor::empty({s.n, s.k, s.p(), s.q()});
    auto dx = Tensor::empty({s.n, s.c, s.h, s.w});
    auto dw = Tensor::empty({s.k, s.c, s.r, s.s}), db = Tensor::empty({s.k});
    OpCachePtr cache;
    std::vector<double> tf, tb, cf, cb;
    for (int i = 0; i < reps + 1; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      const double c0 = cpu_ms();
      conv2d_forward_cpu(cache, s, x, w, b.bias ? &bias : nullptr, y);
      auto t1 = std::chrono::steady_clock::now();
      const double c1 = cpu_ms();
      conv2d_backward_cpu(cache, s, x, w, dy, b.dx ? &dx : nullptr, dw, b.bias ? &db : nullptr, false);
      auto t2 = std::chrono::steady_clock::now();
      const double c2 = cpu_ms();
      if (i == 0) continue;  // first call builds the primitives
      tf.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      tb.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
      cf.push_back(c1 - c0);
      cb.push_back(c2 - c1);
    }
    std::printf("conv2d,%s,%d,%.3f,%.3f,%.3f,%.3f\n", b.name.c_str(), s.n, median_ms(tf), median_ms(tb),
                *std::min_element(cf.begin(), cf.end()), *std::min_element(cb.begin(), cb.end()));
    std::fflush(stdout);
  }
}

TEST_CASE("conv2d dispatcher rejects stride 0 before computing the output size", "[conv2d]") {
  OpCachePtr cache;
  Tensor x = Tensor::zeros({1, 1, 4, 4}, DType::f32, Device::cpu), w = Tensor::zeros({1, 1, 3, 3}, DType::f32, Device::cpu);
  Tensor y = Tensor::zeros({1, 1, 2, 2}, DType::f32, Device::cpu);
  REQUIRE_THROWS_WITH(conv2d_forward(cache, shape(1, 1, 4, 4, 1, 3, 3, 0, 0), x, w, nullptr, y),
                      Catch::Contains("invalid shape N=1 C=1 H=4 W=4 K=1 R=3 S=3 stride=0 pad=0"));
  Tensor bad_y = Tensor::zeros({1, 1, 3, 3}, DType::f32, Device::cpu);
  REQUIRE_THROWS_WITH(conv2d_forward(cache, shape(1, 1, 4, 4, 1, 3, 3, 1, 0), x, w, nullptr, bad_y),
                      Catch::Contains("conv2d_forward") && Catch::Contains(": y"));
}
