#pragma once
// Naive reference batch normalization (see batchnorm2d.hpp for the PyTorch semantics), templated on
// the element type (float/double) over raw NCHW pointers, for tests. Two-pass mean/variance; the
// backward is the textbook formula (Ioffe & Szegedy 2015, eq. in sec. 3):
//   xhat = (x - mean) * invstd, dbeta = sum dy, dgamma = sum dy * xhat,
//   dx = gamma * invstd / M * (M * dy - dbeta - xhat * dgamma), M = N*H*W.
#include <cmath>
#include <cstdint>

#include "src/ops/batchnorm2d.hpp"

namespace ht::ref {

namespace detail {
inline int64_t bn_index(const BatchNormShape& sh, int n, int c, int64_t i) {
  return (static_cast<int64_t>(n) * sh.c + c) * sh.h * sh.w + i;
}
}  // namespace detail

/// Training forward: y, the batch statistics save_mean / save_invstd = 1/sqrt(var_b + eps) (biased
/// var_b), and the running statistics updated in place with momentum (unbiased variance).
template <class T>
void batchnorm2d_forward_train(const BatchNormShape& sh, const T* x, const T* gamma, const T* beta, T* y,
                               T* running_mean, T* running_var, T* save_mean, T* save_invstd) {
  const int64_t hw = static_cast<int64_t>(sh.h) * sh.w;
  const T m = T(sh.n) * T(hw);
  const T mom = T(sh.momentum);
  for (int c = 0; c < sh.c; ++c) {
    T sum = 0;
    for (int n = 0; n < sh.n; ++n)
      for (int64_t i = 0; i < hw; ++i) sum += x[detail::bn_index(sh, n, c, i)];
    const T mean = sum / m;
    T sq = 0;
    for (int n = 0; n < sh.n; ++n)
      for (int64_t i = 0; i < hw; ++i) {
        const T d = x[detail::bn_index(sh, n, c, i)] - mean;
        sq += d * d;
      }
    const T var = sq / m;
    const T invstd = T(1) / std::sqrt(var + T(sh.eps));
    for (int n = 0; n < sh.n; ++n)
      for (int64_t i = 0; i < hw; ++i) {
        const int64_t k = detail::bn_index(sh, n, c, i);
        y[k] = gamma[c] * (x[k] - mean) * invstd + beta[c];
      }
    save_mean[c] = mean;
    save_invstd[c] = invstd;
    running_mean[c] = (T(1) - mom) * running_mean[c] + mom * mean;
    running_var[c] = (T(1) - mom) * running_var[c] + mom * var * m / (m - T(1));
  }
}

/// Inference forward with the given statistics.
template <class T>
void batchnorm2d_forward_infer(const BatchNormShape& sh, const T* x, const T* gamma, const T* beta,
                               const T* running_mean, const T* running_var, T* y) {
  const int64_t hw = static_cast<int64_t>(sh.h) * sh.w;
  for (int c = 0; c < sh.c; ++c) {
    const T invstd = T(1) / std::sqrt(running_var[c] + T(sh.eps));
    for (int n = 0; n < sh.n; ++n)
      for (int64_t i = 0; i < hw; ++i) {
        const int64_t k = detail::bn_index(sh, n, c, i);
        y[k] = gamma[c] * (x[k] - running_mean[c]) * invstd + beta[c];
      }
  }
}

/// Training backward: dx, dgamma, dbeta (all overwritten).
template <class T>
void batchnorm2d_backward(const BatchNormShape& sh, const T* x, const T* dy, const T* gamma, const T* save_mean,
                          const T* save_invstd, T* dx, T* dgamma, T* dbeta) {
  const int64_t hw = static_cast<int64_t>(sh.h) * sh.w;
  const T m = T(sh.n) * T(hw);
  for (int c = 0; c < sh.c; ++c) {
    T sdy = 0, sdyx = 0;
    for (int n = 0; n < sh.n; ++n)
      for (int64_t i = 0; i < hw; ++i) {
        const int64_t k = detail::bn_index(sh, n, c, i);
        sdy += dy[k];
        sdyx += dy[k] * (x[k] - save_mean[c]) * save_invstd[c];
      }
    dbeta[c] = sdy;
    dgamma[c] = sdyx;
    for (int n = 0; n < sh.n; ++n)
      for (int64_t i = 0; i < hw; ++i) {
        const int64_t k = detail::bn_index(sh, n, c, i);
        const T xhat = (x[k] - save_mean[c]) * save_invstd[c];
        dx[k] = gamma[c] * save_invstd[c] / m * (m * dy[k] - sdy - xhat * sdyx);
      }
  }
}

}  // namespace ht::ref
