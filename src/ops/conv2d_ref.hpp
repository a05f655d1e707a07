#pragma once
// Naive reference 2-D convolution (cross-correlation, NCHW / KCRS), templated on the element type so
// tests can run it in double. Written for clarity, not speed: the oracle for the oneDNN and cuDNN
// implementations and for finite-difference checks. Same semantics as src/ops/conv2d.hpp.
#include <algorithm>
#include <cstddef>

#include "src/ops/conv2d.hpp"

namespace ht::ref {

/// Calls tap(xi, wi) for every input position x[n,c,ih,iw] that output y[n,k,p,q] reads, with xi its
/// index in x [N,C,H,W] and wi that of its weight in w [K,C,R,S], in c, r, s order (padding skipped).
template <class Tap>
void for_each_tap(const Conv2dShape& sh, int n, int k, int p, int q, Tap tap) {
  for (int c = 0; c < sh.c; ++c)
    for (int r = 0; r < sh.r; ++r) {
      const int ih = p * sh.stride - sh.pad + r;
      if (ih < 0 || ih >= sh.h) continue;
      for (int s = 0; s < sh.s; ++s) {
        const int iw = q * sh.stride - sh.pad + s;
        if (iw < 0 || iw >= sh.w) continue;
        tap(((size_t(n) * sh.c + c) * sh.h + ih) * sh.w + iw, ((size_t(k) * sh.c + c) * sh.r + r) * sh.s + s);
      }
    }
}

/// y[n,k,p,q] = b[k] + sum_{c,r,s} x[n,c,p*stride-pad+r,q*stride-pad+s] * w[k,c,r,s]
/// (out-of-range input positions are zero padding). x [N,C,H,W], w [K,C,R,S], b [K] or null,
/// y [N,K,P,Q], all contiguous.
template <class T>
void conv2d_forward(const Conv2dShape& sh, const T* x, const T* w, const T* b, T* y) {
  const int P = sh.p(), Q = sh.q();
  for (int n = 0; n < sh.n; ++n)
    for (int k = 0; k < sh.k; ++k)
      for (int p = 0; p < P; ++p)
        for (int q = 0; q < Q; ++q) {
          T acc = b ? b[k] : T(0);
          for_each_tap(sh, n, k, p, q, [&](size_t xi, size_t wi) { acc += x[xi] * w[wi]; });
          y[((size_t(n) * sh.k + k) * P + p) * Q + q] = acc;
        }
}

/// Gradients of conv2d_forward given dy [N,K,P,Q]: dx [N,C,H,W] (skipped when null), dw [K,C,R,S],
/// db [K] (skipped when null). All outputs are overwritten.
template <class T>
void conv2d_backward(const Conv2dShape& sh, const T* x, const T* w, const T* dy, T* dx, T* dw, T* db) {
  const int P = sh.p(), Q = sh.q();
  if (dx) std::fill(dx, dx + size_t(sh.n) * sh.c * sh.h * sh.w, T(0));
  if (dw) std::fill(dw, dw + size_t(sh.k) * sh.c * sh.r * sh.s, T(0));
  if (db) std::fill(db, db + sh.k, T(0));
  for (int n = 0; n < sh.n; ++n)
    for (int k = 0; k < sh.k; ++k)
      for (int p = 0; p < P; ++p)
        for (int q = 0; q < Q; ++q) {
          const T g = dy[((size_t(n) * sh.k + k) * P + p) * Q + q];
          if (db) db[k] += g;
          for_each_tap(sh, n, k, p, q, [&](size_t xi, size_t wi) {
            if (dx) dx[xi] += g * w[wi];
            if (dw) dw[wi] += g * x[xi];
          });
        }
}

}  // namespace ht::ref
