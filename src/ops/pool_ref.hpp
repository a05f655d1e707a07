#pragma once
// Naive reference pooling (see pool.hpp), templated on the element type (float/double) over raw
// NCHW pointers, for tests. Max pool: padding is -inf, the first maximum of a window in row-major
// order wins (PyTorch's tie rule), a NaN beats every number and the last NaN wins (PyTorch's
// `v > max || isnan(v)`); windows are recomputed in backward rather than saved.
#include <cstdint>
#include <limits>

#include "src/ops/pool.hpp"

namespace ht::ref {

/// Flat index into x of the first maximum of output window (n,c,p,q), or -1 if the window lies
/// entirely in padding (cannot happen for pad < kernel).
template <class T> int64_t maxpool2d_argmax(const T* x, const PoolShape& sh, int n, int c, int p, int q) {
  const int64_t plane = static_cast<int64_t>(n * sh.c + c) * sh.h * sh.w;
  T best = -std::numeric_limits<T>::infinity();
  int64_t arg = -1;
  for (int i = 0; i < sh.kernel; ++i)
    for (int j = 0; j < sh.kernel; ++j) {
      const int hi = p * sh.stride - sh.pad + i, wj = q * sh.stride - sh.pad + j;
      if (hi < 0 || hi >= sh.h || wj < 0 || wj >= sh.w) continue;
      const int64_t idx = plane + static_cast<int64_t>(hi) * sh.w + wj;
      if (arg < 0 || x[idx] > best || x[idx] != x[idx]) { best = x[idx]; arg = idx; }  // NaN wins, last one
    }
  return arg;
}

/// x [N,C,H,W] -> y [N,C,P,Q].
template <class T> void maxpool2d_forward(const T* x, const PoolShape& sh, T* y) {
  const int P = sh.p(), Q = sh.q();
  for (int n = 0; n < sh.n; ++n)
    for (int c = 0; c < sh.c; ++c)
      for (int p = 0; p < P; ++p)
        for (int q = 0; q < Q; ++q) {
          const int64_t a = maxpool2d_argmax(x, sh, n, c, p, q);
          y[((static_cast<int64_t>(n) * sh.c + c) * P + p) * Q + q] = a < 0 ? -std::numeric_limits<T>::infinity() : x[a];
        }
}

/// dy [N,C,P,Q] -> dx [N,C,H,W] (overwritten): each dy goes to its window's arg-max.
template <class T> void maxpool2d_backward(const T* x, const T* dy, const PoolShape& sh, T* dx) {
  const int P = sh.p(), Q = sh.q();
  const int64_t nx = static_cast<int64_t>(sh.n) * sh.c * sh.h * sh.w;
  for (int64_t i = 0; i < nx; ++i) dx[i] = T(0);
  for (int n = 0; n < sh.n; ++n)
    for (int c = 0; c < sh.c; ++c)
      for (int p = 0; p < P; ++p)
        for (int q = 0; q < Q; ++q) {
          const int64_t a = maxpool2d_argmax(x, sh, n, c, p, q);
          if (a >= 0) dx[a] += dy[((static_cast<int64_t>(n) * sh.c + c) * P + p) * Q + q];
        }
}

/// x [N,C,H,W] -> y [N,C], the mean of each plane.
template <class T> void global_avgpool_forward(const T* x, int n, int c, int h, int w, T* y) {
  for (int64_t nc = 0; nc < static_cast<int64_t>(n) * c; ++nc) {
    T s = 0;
    for (int64_t i = 0; i < static_cast<int64_t>(h) * w; ++i) s += x[nc * h * w + i];
    y[nc] = s / T(h * w);
  }
}

/// dy [N,C] -> dx [N,C,H,W] = dy / (H*W) everywhere in the plane.
template <class T> void global_avgpool_backward(const T* dy, int n, int c, int h, int w, T* dx) {
  for (int64_t nc = 0; nc < static_cast<int64_t>(n) * c; ++nc)
    for (int64_t i = 0; i < static_cast<int64_t>(h) * w; ++i) dx[nc * h * w + i] = dy[nc] / T(h * w);
}

}  // namespace ht::ref
