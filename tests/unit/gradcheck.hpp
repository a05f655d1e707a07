#pragma once
// Central finite differences in double precision for op backward tests.
//   numeric_grad(f, x): d f / d x_i ~ (f(x + h e_i) - f(x - h e_i)) / (2h) for every i,
// where f is a scalar function of the whole vector x (typically sum_j g_j * y_j(x) for a fixed random
// g, so that the analytic gradient is the op's backward applied to dy = g).
#include <cmath>
#include <functional>
#include <random>
#include <vector>

namespace ht::test {

inline std::vector<double> numeric_grad(const std::function<double(const std::vector<double>&)>& f,
                                        std::vector<double> x, double h = 1e-6) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double xi = x[i];
    x[i] = xi + h;
    const double fp = f(x);
    x[i] = xi - h;
    const double fm = f(x);
    x[i] = xi;
    g[i] = (fp - fm) / (2 * h);
  }
  return g;
}

/// Max over i of |a_i - b_i| / max(1, |b_i|).
inline double max_rel_err(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]) / std::max(1.0, std::abs(b[i])));
  return a.size() == b.size() ? m : INFINITY;
}

inline std::vector<double> random_vec(size_t n, uint32_t seed, double lo = -1, double hi = 1) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = u(gen);
  return v;
}

/// sum_i a_i * b_i
inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace ht::test
