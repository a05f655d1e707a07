// The cuBLAS GEMM parameters of the GPU linear layer (src/ops/linear_gpu_gemm.hpp) run through a reference
// column-major SGEMM with BLAS semantics (op, m/n/k, leading dimensions, alpha/beta) on the CPU,
// against the naive row-major reference (src/ops/linear_ref.hpp): a transposition, a swapped
// dimension or a wrong leading dimension gives O(1) errors here, without a GPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "src/ops/linear_gpu_gemm.hpp"
#include "src/ops/linear_ref.hpp"

using namespace ht;
using namespace ht::cuda;

namespace {

/// BLAS sgemm, column-major: C[i + j*ldc] = alpha * sum_l opA(i,l) opB(l,j) + beta * C (C not read
/// when beta == 0). Checks the leading dimensions as cuBLAS does (lda >= rows of A as stored).
void ref_sgemm(bool ta, bool tb, int m, int n, int k, double alpha, const double* a, int lda, const double* b, int ldb,
               double beta, double* c, int ldc) {
  REQUIRE(lda >= (ta ? k : m));
  REQUIRE(ldb >= (tb ? n : k));
  REQUIRE(ldc >= m);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      double s = 0;
      for (int l = 0; l < k; ++l) {
        const double av = ta ? a[l + size_t(i) * lda] : a[i + size_t(l) * lda];
        const double bv = tb ? b[j + size_t(l) * ldb] : b[l + size_t(j) * ldb];
        s += av * bv;
      }
      double& cv = c[i + size_t(j) * ldc];
      cv = alpha * s + (beta == 0 ? 0.0 : beta * cv);
    }
}

std::vector<double> rnd(size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<double> d;
  std::vector<double> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

void run(const GemmCall& g, const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& dy,
         double beta, std::vector<double>& c) {
  auto pick = [&](GemmOperand o) { return o == GemmOperand::x ? x.data() : o == GemmOperand::w ? w.data() : dy.data(); };
  ref_sgemm(g.trans_a, g.trans_b, g.m, g.n, g.k, 1.0, pick(g.a), g.lda, pick(g.b), g.ldb, beta, c.data(), g.ldc);
  // The call covers exactly the output: m*n elements with ldc == m (packed).
  CHECK(size_t(g.m) * size_t(g.n) == c.size());
  CHECK(g.ldc == g.m);
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

}  // namespace

TEST_CASE("linear GEMM parameters give y, dx and dw of the row-major definitions", "[gemm_params]") {
  for (LinearShape sh : {LinearShape{7, 33, 10}, LinearShape{1, 5, 3}, LinearShape{4, 1, 6}, LinearShape{3, 8, 1},
                         LinearShape{16, 16, 16}}) {
    INFO("n " << sh.n << " in " << sh.in << " out " << sh.out);
    const auto x = rnd(size_t(sh.n) * sh.in, 1), w = rnd(size_t(sh.out) * sh.in, 2), dy = rnd(size_t(sh.n) * sh.out, 3);
    std::vector<double> y_ref(size_t(sh.n) * sh.out), dx_ref(size_t(sh.n) * sh.in), dw_ref(size_t(sh.out) * sh.in);
    ref::linear_forward<double>(sh, x.data(), w.data(), nullptr, y_ref.data());
    ref::linear_backward<double>(sh, x.data(), w.data(), dy.data(), dx_ref.data(), dw_ref.data(), nullptr);

    std::vector<double> y(y_ref.size(), NAN), dx(dx_ref.size(), NAN), dw(dw_ref.size(), NAN);
    run(linear_forward_gemm(sh), x, w, dy, 0.0, y);
    run(linear_dx_gemm(sh), x, w, dy, 0.0, dx);
    run(linear_dw_gemm(sh), x, w, dy, 0.0, dw);
    CHECK(max_abs_diff(y, y_ref) < 1e-12);
    CHECK(max_abs_diff(dx, dx_ref) < 1e-12);
    CHECK(max_abs_diff(dw, dw_ref) < 1e-12);

    // beta = 1 accumulates into dw (gradient accumulation over micro-batches).
    std::vector<double> dw_acc = rnd(dw_ref.size(), 4), expect = dw_acc;
    for (size_t i = 0; i < expect.size(); ++i) expect[i] += dw_ref[i];
    run(linear_dw_gemm(sh), x, w, dy, 1.0, dw_acc);
    CHECK(max_abs_diff(dw_acc, expect) < 1e-12);
  }
}
