#pragma once
// float32 CPU tensors from and to double vectors, for op tests that compare against references.
#include <catch2/catch.hpp>

#include <vector>

#include "src/base/tensor.hpp"

namespace ht::test {

/// A float32 tensor of `shape` holding v (rounded to float).
inline Tensor to_tensor(const std::vector<double>& v, std::vector<int64_t> shape) {
  auto t = Tensor::empty(std::move(shape));
  auto s = t.span<float>();
  REQUIRE(s.size() == v.size());
  for (size_t i = 0; i < v.size(); ++i) s[i] = static_cast<float>(v[i]);
  return t;
}

/// The elements of a float32 CPU tensor as doubles.
inline std::vector<double> to_vec(const Tensor& t) {
  auto s = t.span<float>();
  return {s.begin(), s.end()};
}

}  // namespace ht::test
