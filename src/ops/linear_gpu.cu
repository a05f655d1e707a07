// Fully connected layer through cuBLAS. The GEMM parameters (row-major tensors read as column-major
// transposes) come from src/ops/linear_gpu_gemm.hpp, which is unit-tested on the CPU. The bias add and the
// bias gradient (a fixed-order column sum, deterministic) are own kernels.
//  - float32 activations: SGEMM, strict (CUBLAS_DEFAULT_MATH) unless Options::allow_tf32
//    (CUBLAS_TF32_TENSOR_OP_MATH).
//  - bfloat16/float16 activations x: cublasGemmEx with A and B in x's dtype, CUBLAS_COMPUTE_32F
//    (float32 accumulation, tensor cores), C in the output's own dtype: y may be float32 (the logits
//    feeding the float32 softmax) or x's dtype; dx is in its tensor's dtype; dw is float32 (the
//    master gradient, accumulated in float32). The float32 master w is rounded to a low-precision
//    copy in the layer's cache for each pass, and dy is rounded to x's dtype when it is another
//    (cuBLAS wants A and B of one type); the bias gradient sums the original dy.
#include "src/ops/gpu_common.cuh"
#include "src/ops/convert_gpu.hpp"
#include "src/ops/linear_gpu_gemm.hpp"
#include "src/ops/lowp_gpu.cuh"
#include "src/ops/linear.hpp"

namespace ht::cuda {
namespace {

template <class T>
__global__ void add_bias_kernel(T* __restrict__ y, const float* __restrict__ b, int64_t n, int out) {
  const int64_t total = n * out;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x)
    store_f(y, i, load_f(y, i) + b[i % out]);
}

// db[o] (+)= sum_n dy[n, o]; one thread per output feature, rows in order.
template <class T>
__global__ void bias_grad_kernel(const T* __restrict__ dy, float* __restrict__ db, int n, int out, bool accumulate) {
  const int o = blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= out) return;
  float s = 0.f;
  for (int i = 0; i < n; ++i) s += load_f(dy, int64_t{i} * out + o);
  db[o] = accumulate ? db[o] + s : s;
}

/// The layer's low-precision copies (GPU, x's dtype).
struct LinearCache : OpCache {
  Tensor w_lp, dy_lp;
};

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    default: break;
  }
  throw RuntimeError(std::string("linear: no cuBLAS data type for dtype ") + dtype_name(t));
}

/// The three operands of the layer as raw device pointers, with their dtypes.
struct Operands {
  const void *x, *w, *dy;
  DType ab;  ///< the dtype of the A and B operands (x's)
};

/// Runs one GemmCall: float32 operands through SGEMM, low-precision ones through GemmEx.
void gemm(cublasHandle_t h, const GemmCall& g, const Operands& o, const float* beta, void* c, DType c_type) {
  auto pick = [&](GemmOperand op) { return op == GemmOperand::x ? o.x : op == GemmOperand::w ? o.w : o.dy; };
  const cublasOperation_t ta = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (o.ab == DType::f32) {
    if (c_type != DType::f32)
      throw RuntimeError(std::string("linear: a ") + dtype_name(c_type) + " output of float32 operands (expected float32)");
    HT_CUBLAS_CHECK(cublasSgemm(h, ta, tb, g.m, g.n, g.k, Scalars::one(), static_cast<const float*>(pick(g.a)), g.lda,
                                static_cast<const float*>(pick(g.b)), g.ldb, beta, static_cast<float*>(c), g.ldc));
    return;
  }
  const cudaDataType_t ab = cuda_type(o.ab);
  HT_CUBLAS_CHECK(cublasGemmEx(h, ta, tb, g.m, g.n, g.k, Scalars::one(), pick(g.a), ab, g.lda, pick(g.b), ab, g.ldb,
                               beta, c, cuda_type(c_type), g.ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void set_math(cublasHandle_t h) {
  HT_CUBLAS_CHECK(cublasSetMathMode(h, options().allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
}

/// w (float32 master) as the GEMM operand of dtype `t`: itself, or the cache's rounded copy made now.
const void* weight_for(LinearCache& lc, const Tensor& w, DType t) {
  if (t == DType::f32) return w.raw();
  lc.w_lp.ensure(w.shape(), t, Device::cuda);
  convert_elements(w, lc.w_lp);
  return lc.w_lp.raw();
}

}  // namespace

}  // namespace ht::cuda

namespace ht {
using namespace ht::cuda;  // this file's helpers above

// The GPU halves declared in src/ops/linear.hpp.
void linear_forward_gpu(OpCachePtr& cache, const LinearShape& sh, const Tensor& x, const Tensor& w, const Tensor* b,
                        Tensor& y) {
  Context& cx = ctx();
  LinearCache& lc = cache_as<LinearCache>(cache);
  set_math(cx.cublas);
  const Operands o{x.raw(), weight_for(lc, w, x.dtype()), nullptr, x.dtype()};
  gemm(cx.cublas, linear_forward_gemm(sh), o, Scalars::zero(), y.raw(), y.dtype());
  if (b) {
    const int64_t total = int64_t{sh.n} * sh.out;
    with_typed(y, "linear_forward", [&](auto* yp) {
      add_bias_kernel<<<blocks_for(total), kThreads, 0, cx.compute>>>(yp, static_cast<const float*>(b->raw()), sh.n,
                                                                      sh.out);
    });
    HT_KERNEL_CHECK();
  }
}

void linear_backward_gpu(OpCachePtr& cache, const LinearShape& sh, const Tensor& x, const Tensor& w, const Tensor& dy,
                         Tensor* dx, Tensor& dw, Tensor* db, bool accumulate) {
  Context& cx = ctx();
  LinearCache& lc = cache_as<LinearCache>(cache);
  set_math(cx.cublas);
  const DType t = x.dtype();
  const void* dyp = dy.raw();
  if (dy.dtype() != t) {
    lc.dy_lp.ensure(dy.shape(), t, Device::cuda);
    convert_elements(dy, lc.dy_lp);
    dyp = lc.dy_lp.raw();
  }
  const Operands o{x.raw(), dx ? weight_for(lc, w, t) : nullptr, dyp, t};
  gemm(cx.cublas, linear_dw_gemm(sh), o, Scalars::beta(accumulate), dw.raw(), DType::f32);
  if (dx) gemm(cx.cublas, linear_dx_gemm(sh), o, Scalars::zero(), dx->raw(), dx->dtype());
  if (db) {
    with_typed(dy, "linear_backward", [&](auto* p) {
      bias_grad_kernel<<<(sh.out + kThreads - 1) / kThreads, kThreads, 0, cx.compute>>>(
          p, static_cast<float*>(db->raw()), sh.n, sh.out, accumulate);
    });
    HT_KERNEL_CHECK();
  }
}

}  // namespace ht
