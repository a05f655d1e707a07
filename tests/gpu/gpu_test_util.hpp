#pragma once
// Helpers for GPU-vs-CPU tests: seeded random host tensors, copies between devices, and the error
// measure used with the per-op tolerances: max_i |got_i - ref_i| / max(max_i |ref_i|, 1e-30).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "base/tensor.hpp"
#include "src/ops/batchnorm2d.hpp"

namespace ht::gputest {

inline Tensor randn(std::vector<int64_t> shape, uint32_t seed, float mean = 0.f, float stddev = 1.f) {
  Tensor t = Tensor::empty(std::move(shape));
  std::mt19937 g(seed);
  std::normal_distribution<float> d(mean, stddev);
  for (float& v : t.span<float>()) v = d(g);
  return t;
}

inline Tensor gpu(const Tensor& t) { return t.to(Device::cuda); }

/// A GPU float32 tensor filled with NaN, for outputs: an element the op fails to write stays NaN and
/// rel_err reports it (infinite error). Tensor::empty on the GPU may hand back a block that still
/// holds a previous result, which could hide an unwritten element.
inline Tensor poisoned(std::vector<int64_t> shape) {
  Tensor t = Tensor::empty(std::move(shape));
  for (float& v : t.span<float>()) v = std::numeric_limits<float>::quiet_NaN();
  return gpu(t);
}
inline Tensor host(const Tensor& t) { return t.to(Device::cpu); }

/// Batch-norm parameters for `sh` from fixed seeds (gamma near 1, beta, running mean near 0, running
/// variance near 1) and the CPU half's training forward of `x` with them: what the GPU batch-norm
/// tests compare with. rm_ref and rv_ref are the running statistics after that pass.
struct BatchNormTrainReference {
  Tensor gamma, beta, rm, rv, y_ref, sm_ref, si_ref, rm_ref, rv_ref;
};
inline BatchNormTrainReference batchnorm_train_reference(OpCachePtr& cc, const BatchNormShape& sh, const Tensor& x) {
  const int64_t c = sh.c;
  BatchNormTrainReference r{randn({c}, 2, 1.f, 0.1f), randn({c}, 3),           randn({c}, 4, 0.f, 0.1f),
                            randn({c}, 5, 1.f, 0.05f), Tensor::empty(x.shape()), Tensor::empty({c}),
                            Tensor::empty({c}),        Tensor::empty({c}),       Tensor::empty({c})};
  r.rm_ref.copy_from(r.rm);
  r.rv_ref.copy_from(r.rv);
  batchnorm2d_forward_train_cpu(cc, sh, x, r.gamma, r.beta, r.y_ref, r.rm_ref, r.rv_ref, r.sm_ref, r.si_ref);
  return r;
}

/// Relative max error of a GPU tensor against a CPU reference (see above).
inline double rel_err(const Tensor& got_gpu, const Tensor& ref) {
  Tensor g = host(got_gpu);
  REQUIRE(g.numel() == ref.numel());
  double diff = 0, scale = 0;
  auto a = g.span<float>();
  auto b = ref.span<float>();
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return diff / std::max(scale, 1e-30);
}

/// True when every element is bitwise equal.
inline bool bit_equal(const Tensor& got_gpu, const Tensor& ref) {
  Tensor g = host(got_gpu);
  if (g.numel() != ref.numel()) return false;
  auto a = g.span<float>();
  auto b = ref.span<float>();
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return false;
  return true;
}

}  // namespace ht::gputest
