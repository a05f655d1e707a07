#pragma once
// What the conv2d and linear tests share: float-representable inputs for one forward + backward,
// the runs of the double-precision reference and of the CPU half, the four outputs, and their
// comparison.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "src/ops/conv2d.hpp"
#include "src/ops/conv2d_ref.hpp"
#include "src/ops/linear.hpp"
#include "src/ops/linear_ref.hpp"
#include "base/tensor.hpp"
#include "tests/unit/gradcheck.hpp"
#include "tests/unit/tensor_test_util.hpp"

namespace ht::test {

/// Inputs of one implementation-vs-reference comparison: x, w, b, dy with nx, nw, nb, ny elements,
/// rounded to float so both sides see the same data. Seeds seed..seed+3; w in [-0.5, 0.5], the rest in
/// [-1, 1].
struct WeightedOpData {
  std::vector<double> x, w, b, dy;
  WeightedOpData(size_t nx, size_t nw, size_t nb, size_t ny, uint32_t seed)
      : x(round_to_float(random_vec(nx, seed))),
        w(round_to_float(random_vec(nw, seed + 1, -0.5, 0.5))),
        b(round_to_float(random_vec(nb, seed + 2))),
        dy(round_to_float(random_vec(ny, seed + 3))) {}
};

/// Outputs of one forward + backward: y, and the gradients dx (empty when not wanted), dw, db (empty
/// without bias).
struct WeightedOpResult {
  std::vector<double> y, dx, dw, db;

  /// Zero-filled outputs to be written by a reference: y of ny, dx of nx (0 unless want_dx), dw of nw,
  /// db of nb (0 without bias).
  static WeightedOpResult sized(size_t ny, size_t nx, size_t nw, size_t nb, bool bias, bool want_dx) {
    WeightedOpResult r;
    r.y.resize(ny);
    r.dx.resize(want_dx ? nx : 0);
    r.dw.resize(nw);
    r.db.resize(bias ? nb : 0);
    return r;
  }
};

/// The float32 CPU outputs as a WeightedOpResult; dx only when want_dx, db only when bias.
inline WeightedOpResult collect(const Tensor& y, const Tensor& dx, const Tensor& dw, const Tensor& db, bool bias,
                                bool want_dx) {
  WeightedOpResult r;
  r.y = to_vec(y);
  if (want_dx) r.dx = to_vec(dx);
  r.dw = to_vec(dw);
  if (bias) r.db = to_vec(db);
  return r;
}

/// Tensor shapes of one weighted op: x, w, b; dy has y's shape.
struct WeightedOpDims {
  std::vector<int64_t> x, w, b, y;
};

inline size_t numel(const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

/// What each weighted op is: its tensor shapes, its double-precision reference and its CPU half.
template <class Shape>
struct WeightedOp;

template <>
struct WeightedOp<Conv2dShape> {
  /// x [N,C,H,W], w [K,C,R,S], b [K], y [N,K,P,Q].
  static WeightedOpDims dims(const Conv2dShape& s) {
    return {{s.n, s.c, s.h, s.w}, {s.k, s.c, s.r, s.s}, {s.k}, {s.n, s.k, s.p(), s.q()}};
  }
  static constexpr auto ref_forward = ref::conv2d_forward<double>;
  static constexpr auto ref_backward = ref::conv2d_backward<double>;
  static constexpr auto cpu_forward = conv2d_forward_cpu;
  static constexpr auto cpu_backward = conv2d_backward_cpu;
};

template <>
struct WeightedOp<LinearShape> {
  /// x [N,in], w [out,in], b [out], y [N,out].
  static WeightedOpDims dims(const LinearShape& s) { return {{s.n, s.in}, {s.out, s.in}, {s.out}, {s.n, s.out}}; }
  static constexpr auto ref_forward = ref::linear_forward<double>;
  static constexpr auto ref_backward = ref::linear_backward<double>;
  static constexpr auto cpu_forward = linear_forward_cpu;
  static constexpr auto cpu_backward = linear_backward_cpu;
};

/// WeightedOpData for one op shape, with the shape and its tensor shapes.
template <class Shape>
struct WeightedOpCase : WeightedOpData {
  Shape sh;
  WeightedOpDims dims;
  WeightedOpCase(const Shape& s, uint32_t seed) : WeightedOpCase(s, WeightedOp<Shape>::dims(s), seed) {}

 private:
  WeightedOpCase(const Shape& s, const WeightedOpDims& d, uint32_t seed)
      : WeightedOpData(numel(d.x), numel(d.w), numel(d.b), numel(d.y), seed), sh(s), dims(d) {}
};

/// The double-precision reference forward + backward on d.
template <class Shape>
WeightedOpResult run_ref(const WeightedOpCase<Shape>& d, bool bias, bool want_dx) {
  const WeightedOpDims& n = d.dims;
  auto r = WeightedOpResult::sized(numel(n.y), numel(n.x), numel(n.w), numel(n.b), bias, want_dx);
  WeightedOp<Shape>::ref_forward(d.sh, d.x.data(), d.w.data(), bias ? d.b.data() : nullptr, r.y.data());
  WeightedOp<Shape>::ref_backward(d.sh, d.x.data(), d.w.data(), d.dy.data(), want_dx ? r.dx.data() : nullptr,
                                  r.dw.data(), bias ? r.db.data() : nullptr);
  return r;
}

/// One float32 forward + backward (not accumulating) of the op's CPU half on d.
template <class Shape>
WeightedOpResult run_cpu(OpCachePtr& cache, const WeightedOpCase<Shape>& d, bool bias, bool want_dx) {
  const WeightedOpDims& n = d.dims;
  auto x = to_tensor(d.x, n.x), w = to_tensor(d.w, n.w), b = to_tensor(d.b, n.b), dy = to_tensor(d.dy, n.y);
  auto y = Tensor::empty(n.y), dx = Tensor::empty(n.x), dw = Tensor::empty(n.w), db = Tensor::empty(n.b);
  WeightedOp<Shape>::cpu_forward(cache, d.sh, x, w, bias ? &b : nullptr, y);
  WeightedOp<Shape>::cpu_backward(cache, d.sh, x, w, dy, want_dx ? &dx : nullptr, dw, bias ? &db : nullptr, false);
  return collect(y, dx, dw, db, bias, want_dx);
}

/// f32 oneDNN vs double reference: |a-b| / max(1,|b|) below this (sums of at most a few thousand
/// products of O(1) values, accumulated in float).
constexpr double kWeightedOpTol = 1e-4;

/// Every output of got within tol of want: max |a-b| / max(1,|b|) < tol (sizes must agree).
inline void compare(const WeightedOpResult& got, const WeightedOpResult& want, double tol = kWeightedOpTol) {
  CHECK(max_rel_err(got.y, want.y) < tol);
  CHECK(max_rel_err(got.dx, want.dx) < tol);
  CHECK(max_rel_err(got.dw, want.dw) < tol);
  CHECK(max_rel_err(got.db, want.db) < tol);
}

}  // namespace ht::test
