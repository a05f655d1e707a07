// Fully connected layer through cuBLAS SGEMM. The GEMM parameters (row-major tensors read as
// column-major transposes) come from cuda/gemm_params.hpp, which is unit-tested on the CPU.
// The bias add and the bias gradient (a fixed-order column sum, deterministic) are own kernels.
// FP32 GEMMs are strict (CUBLAS_DEFAULT_MATH) unless Options::allow_tf32 (CUBLAS_TF32_TENSOR_OP_MATH).
#include "cuda/common.cuh"
#include "cuda/gemm_params.hpp"
#include "src/base/op_halves.hpp"

namespace ht::cuda {
namespace {

__global__ void add_bias_kernel(float* __restrict__ y, const float* __restrict__ b, int64_t n, int out) {
  const int64_t total = n * out;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x)
    y[i] += b[i % out];
}

// db[o] (+)= sum_n dy[n, o]; one thread per output feature, rows in order.
__global__ void bias_grad_kernel(const float* __restrict__ dy, float* __restrict__ db, int n, int out,
                                 bool accumulate) {
  const int o = blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= out) return;
  float s = 0.f;
  for (int i = 0; i < n; ++i) s += dy[int64_t{i} * out + o];
  db[o] = accumulate ? db[o] + s : s;
}

/// Runs one GemmCall with the layer's operands.
void gemm(cublasHandle_t h, const GemmCall& g, const float* x, const float* w, const float* dy, const float* beta,
          float* c) {
  auto pick = [&](GemmOperand o) { return o == GemmOperand::x ? x : o == GemmOperand::w ? w : dy; };
  HT_CUBLAS_CHECK(cublasSgemm(h, g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, g.m,
                              g.n, g.k, Scalars::one(), pick(g.a), g.lda, pick(g.b), g.ldb, beta, c, g.ldc));
}

void set_math(cublasHandle_t h) {
  HT_CUBLAS_CHECK(cublasSetMathMode(h, options().allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
}

void linear_forward(OpCachePtr&, const LinearShape& sh, const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y) {
  Context& cx = ctx();
  set_math(cx.cublas);
  gemm(cx.cublas, linear_forward_gemm(sh), static_cast<const float*>(x.raw()), static_cast<const float*>(w.raw()),
       nullptr, Scalars::zero(), static_cast<float*>(y.raw()));
  if (b) {
    const int64_t total = int64_t{sh.n} * sh.out;
    add_bias_kernel<<<blocks_for(total), kThreads, 0, cx.compute>>>(static_cast<float*>(y.raw()),
                                                                   static_cast<const float*>(b->raw()), sh.n, sh.out);
    HT_KERNEL_CHECK();
  }
}

void linear_backward(OpCachePtr&, const LinearShape& sh, const Tensor& x, const Tensor& w, const Tensor& dy,
                     Tensor* dx, Tensor& dw, Tensor* db, bool accumulate) {
  Context& cx = ctx();
  set_math(cx.cublas);
  const float* dyp = static_cast<const float*>(dy.raw());
  const float* xp = static_cast<const float*>(x.raw());
  const float* wp = static_cast<const float*>(w.raw());
  gemm(cx.cublas, linear_dw_gemm(sh), xp, wp, dyp, Scalars::beta(accumulate), static_cast<float*>(dw.raw()));
  if (dx) gemm(cx.cublas, linear_dx_gemm(sh), xp, wp, dyp, Scalars::zero(), static_cast<float*>(dx->raw()));
  if (db) {
    bias_grad_kernel<<<(sh.out + kThreads - 1) / kThreads, kThreads, 0, cx.compute>>>(
        dyp, static_cast<float*>(db->raw()), sh.n, sh.out, accumulate);
    HT_KERNEL_CHECK();
  }
}

}  // namespace

const LinearHalf linear = {.forward = linear_forward, .backward = linear_backward};

}  // namespace ht::cuda
