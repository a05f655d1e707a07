// CPU element-wise ops: plain loops over the HT_HD math of src/base/op_math.hpp, vectorisable, and
// split across OpenMP threads only when the tensor is large enough to pay for the fork.
#include <cstdint>
#include <string>

#include "src/ops/elementwise.hpp"

namespace ht::cpu {
namespace {

// Below this many elements a parallel region costs more than it saves.
constexpr int64_t kParallelMin = 1 << 15;

void relu_forward(const Tensor& x, Tensor& y) {
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  const int64_t n = x.numel();
#pragma omp parallel for simd if (n >= kParallelMin) schedule(static)
  for (int64_t i = 0; i < n; ++i) yp[i] = relu_fwd(xp[i]);
}

void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  const float* yp = y.data<float>();
  const float* dyp = dy.data<float>();
  float* dxp = dx.data<float>();
  const int64_t n = y.numel();
#pragma omp parallel for simd if (n >= kParallelMin) schedule(static)
  for (int64_t i = 0; i < n; ++i) dxp[i] = relu_bwd(yp[i], dyp[i]);
}

void add_forward(const Tensor& a, const Tensor& b, Tensor& y) {
  const float* ap = a.data<float>();
  const float* bp = b.data<float>();
  float* yp = y.data<float>();
  const int64_t n = a.numel();
#pragma omp parallel for simd if (n >= kParallelMin) schedule(static)
  for (int64_t i = 0; i < n; ++i) yp[i] = ap[i] + bp[i];
}

void add_inplace(Tensor& y, const Tensor& x) {
  float* yp = y.data<float>();
  const float* xp = x.data<float>();
  const int64_t n = y.numel();
#pragma omp parallel for simd if (n >= kParallelMin) schedule(static)
  for (int64_t i = 0; i < n; ++i) yp[i] += xp[i];
}

void scale_inplace(Tensor& y, float s) {
  float* yp = y.data<float>();
  const int64_t n = y.numel();
#pragma omp parallel for simd if (n >= kParallelMin) schedule(static)
  for (int64_t i = 0; i < n; ++i) yp[i] *= s;
}

int64_t count_nonfinite(const Tensor& x) {
  const float* xp = x.data<float>();
  const int64_t n = x.numel();
  int64_t count = 0;
#pragma omp parallel for simd if (n >= kParallelMin) schedule(static) reduction(+ : count)
  for (int64_t i = 0; i < n; ++i) count += is_nonfinite(xp[i]) ? 1 : 0;
  return count;
}

}  // namespace

HT_DEFINE_ELEMENTWISE_HALF();

}  // namespace ht::cpu
