#pragma once
// What the conv2d and linear tests share: float-representable inputs for one forward + backward,
// the four outputs, and their comparison against the double-precision reference.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "src/base/tensor.hpp"
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

/// Every output of got within tol of want: max |a-b| / max(1,|b|) < tol (sizes must agree).
inline void compare(const WeightedOpResult& got, const WeightedOpResult& want, double tol) {
  CHECK(max_rel_err(got.y, want.y) < tol);
  CHECK(max_rel_err(got.dx, want.dx) < tol);
  CHECK(max_rel_err(got.dw, want.dw) < tol);
  CHECK(max_rel_err(got.db, want.db) < tol);
}

}  // namespace ht::test
