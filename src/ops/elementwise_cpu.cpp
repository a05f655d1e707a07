// CPU element-wise ops: plain loops over the HT_HD math of elementwise.hpp, vectorisable, and
// split across OpenMP threads only when the tensor is large enough to pay for the fork.
#include <cstdint>
#include <string>

#include "src/ops/elementwise.hpp"

namespace ht::cpu {
namespace {

// Below this many elements a parallel region costs more than it saves.
constexpr int64_t kParallelMin = 1 << 15;

void check_f32_host(const Tensor& t, const char* op, const char* name) {
  op_check(t.defined(), op, std::string(name) + " is undefined");
  op_check(t.device() == Device::cpu, op, std::string(name) + " is not on the CPU");
  op_check(t.dtype() == DType::f32, op, std::string(name) + " is " + dtype_name(t.dtype()) + ", expected float32");
}

void check_same_numel(const Tensor& a, const Tensor& b, const char* op, const char* na, const char* nb) {
  op_check(a.numel() == b.numel(), op,
           std::string(na) + " " + a.shape_str() + " and " + nb + " " + b.shape_str() + " differ in size");
}

}  // namespace

void relu_forward(const Tensor& x, Tensor& y) {
  check_f32_host(x, "relu_forward", "x");
  check_f32_host(y, "relu_forward", "y");
  check_same_numel(x, y, "relu_forward", "x", "y");
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  const int64_t n = x.numel();
#pragma omp parallel for simd if (n >= kParallelMin) schedule(static)
  for (int64_t i = 0; i < n; ++i) yp[i] = relu_fwd(xp[i]);
}

void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  check_f32_host(y, "relu_backward", "y");
  check_f32_host(dy, "relu_backward", "dy");
  check_f32_host(dx, "relu_backward", "dx");
  check_same_numel(y, dy, "relu_backward", "y", "dy");
  check_same_numel(y, dx, "relu_backward", "y", "dx");
  const float* yp = y.data<float>();
  const float* dyp = dy.data<float>();
  float* dxp = dx.data<float>();
  const int64_t n = y.numel();
#pragma omp parallel for simd if (n >= kParallelMin) schedule(static)
  for (int64_t i = 0; i < n; ++i) dxp[i] = relu_bwd(yp[i], dyp[i]);
}

void add_forward(const Tensor& a, const Tensor& b, Tensor& y) {
  check_f32_host(a, "add_forward", "a");
  check_f32_host(b, "add_forward", "b");
  check_f32_host(y, "add_forward", "y");
  check_same_numel(a, b, "add_forward", "a", "b");
  check_same_numel(a, y, "add_forward", "a", "y");
  const float* ap = a.data<float>();
  const float* bp = b.data<float>();
  float* yp = y.data<float>();
  const int64_t n = a.numel();
#pragma omp parallel for simd if (n >= kParallelMin) schedule(static)
  for (int64_t i = 0; i < n; ++i) yp[i] = ap[i] + bp[i];
}

void add_inplace(Tensor& y, const Tensor& x) {
  check_f32_host(y, "add_inplace", "y");
  check_f32_host(x, "add_inplace", "x");
  check_same_numel(y, x, "add_inplace", "y", "x");
  float* yp = y.data<float>();
  const float* xp = x.data<float>();
  const int64_t n = y.numel();
#pragma omp parallel for simd if (n >= kParallelMin) schedule(static)
  for (int64_t i = 0; i < n; ++i) yp[i] += xp[i];
}

void scale_inplace(Tensor& y, float s) {
  check_f32_host(y, "scale_inplace", "y");
  float* yp = y.data<float>();
  const int64_t n = y.numel();
#pragma omp parallel for simd if (n >= kParallelMin) schedule(static)
  for (int64_t i = 0; i < n; ++i) yp[i] *= s;
}

int64_t count_nonfinite(const Tensor& x) {
  check_f32_host(x, "count_nonfinite", "x");
  const float* xp = x.data<float>();
  const int64_t n = x.numel();
  int64_t count = 0;
#pragma omp parallel for simd if (n >= kParallelMin) schedule(static) reduction(+ : count)
  for (int64_t i = 0; i < n; ++i) count += is_nonfinite(xp[i]) ? 1 : 0;
  return count;
}

}  // namespace ht::cpu
