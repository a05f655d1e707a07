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

/// out[r * cols + c] = sum_{k < len} term(r, c, k), summed in k order from T(0): the one reduction
/// loop of every gradient below.
template <class T, class Term>
void sum_into(int rows, int cols, int len, T* out, Term term) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      T acc = 0;
      for (int k = 0; k < len; ++k) acc += term(r, c, k);
      out[size_t(r) * cols + c] = acc;
    }
}

/// Gradients given dy [N,out]: dx[n,i] = sum_o dy[n,o] w[o,i] (skipped when null),
/// dw[o,i] = sum_n dy[n,o] x[n,i], db[o] = sum_n dy[n,o] (skipped when null). Overwritten.
template <class T>
void linear_backward(const LinearShape& sh, const T* x, const T* w, const T* dy, T* dx, T* dw, T* db) {
  auto dy_at = [&](int n, int o) { return dy[size_t(n) * sh.out + o]; };
  auto at = [&](const T* m, int r, int i) { return m[size_t(r) * sh.in + i]; };  // row r of x or w
  if (dx) sum_into(sh.n, sh.in, sh.out, dx, [&](int n, int i, int o) { return dy_at(n, o) * at(w, o, i); });
  if (dw) sum_into(sh.out, sh.in, sh.n, dw, [&](int o, int i, int n) { return dy_at(n, o) * at(x, n, i); });
  if (db) sum_into(sh.out, 1, sh.n, db, [&](int o, int, int n) { return dy_at(n, o); });
}

}  // namespace ht::ref
