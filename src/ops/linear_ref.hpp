#pragma once
// Naive reference fully connected layer, templated on the element type so tests can run it in
// double. The oracle for the oneDNN and cuBLAS implementations. Same semantics as src/ops/linear.hpp.
#include <cstddef>

#include "src/ops/linear.hpp"

namespace ht::ref {

/// y[n,o] = b[o] + sum_i x[n,i] * w[o,i]. x [N,in], w [out,in], b [out] or null, y [N,out].
template <class T>
void linear_forward(const LinearShape& sh, const T* x, const T* w, const T* b, T* y) {
  for (int n = 0; n < sh.n; ++n)
    for (int o = 0; o < sh.out; ++o) {
      T acc = b ? b[o] : T(0);
      for (int i = 0; i < sh.in; ++i) acc += x[size_t(n) * sh.in + i] * w[size_t(o) * sh.in + i];
      y[size_t(n) * sh.out + o] = acc;
    }
}

/// Gradients given dy [N,out]: dx[n,i] = sum_o dy[n,o] w[o,i] (skipped when null),
/// dw[o,i] = sum_n dy[n,o] x[n,i], db[o] = sum_n dy[n,o] (skipped when null). Overwritten.
template <class T>
void linear_backward(const LinearShape& sh, const T* x, const T* w, const T* dy, T* dx, T* dw, T* db) {
  if (dx)
    for (int n = 0; n < sh.n; ++n)
      for (int i = 0; i < sh.in; ++i) {
        T acc = 0;
        for (int o = 0; o < sh.out; ++o) acc += dy[size_t(n) * sh.out + o] * w[size_t(o) * sh.in + i];
        dx[size_t(n) * sh.in + i] = acc;
      }
  if (dw)
    for (int o = 0; o < sh.out; ++o)
      for (int i = 0; i < sh.in; ++i) {
        T acc = 0;
        for (int n = 0; n < sh.n; ++n) acc += dy[size_t(n) * sh.out + o] * x[size_t(n) * sh.in + i];
        dw[size_t(o) * sh.in + i] = acc;
      }
  if (db)
    for (int o = 0; o < sh.out; ++o) {
      T acc = 0;
      for (int n = 0; n < sh.n; ++n) acc += dy[size_t(n) * sh.out + o];
      db[o] = acc;
    }
}

}  // namespace ht::ref
