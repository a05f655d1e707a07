#pragma once
// float32 CPU tensors from and to double vectors, for op tests that compare against references.
#include <catch2/catch.hpp>

#include <initializer_list>
#include <vector>

#include "base/tensor.hpp"
#include "tests/unit/gradcheck.hpp"

namespace ht::test {

/// A float32 tensor of `shape` holding v (rounded to float).
inline Tensor to_tensor(const std::vector<double>& v, std::vector<int64_t> shape) {
  auto t = Tensor::empty(std::move(shape));
  auto s = t.span<float>();
  REQUIRE(s.size() == v.size());
  for (size_t i = 0; i < v.size(); ++i) s[i] = static_cast<float>(v[i]);
  return t;
}

/// v with every element rounded to float: the values a float tensor of v holds, in double.
inline std::vector<double> round_to_float(std::vector<double> v) {
  for (auto& x : v) x = static_cast<float>(x);
  return v;
}

/// The elements of a float32 CPU tensor as doubles.
inline std::vector<double> to_vec(const Tensor& t) {
  auto s = t.span<float>();
  return {s.begin(), s.end()};
}

/// One expected output: the tensor got holds want within tol (max |a-b| / max(1,|b|) < tol).
struct Close {
  const char* name;
  const Tensor& got;
  const std::vector<double>& want;
  double tol;
};

/// Checks every row of a table of expected outputs, each failure named by its row.
inline void check_close(std::initializer_list<Close> rows) {
  for (const auto& r : rows) {
    INFO(r.name);
    CHECK(max_rel_err(to_vec(r.got), r.want) < r.tol);
  }
}

}  // namespace ht::test
