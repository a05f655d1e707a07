#pragma once
// 2-D convolution, NCHW activations, KCRS filters, cross-correlation as in PyTorch/cuDNN.
//   forward:  y[n,k,p,q] = b[k] + sum_{c,r,s} x[n,c,p*stride-pad+r,q*stride-pad+s] * w[k,c,r,s]
//   backward: dx (data gradient, skipped when null), dw (filter gradient), db (bias gradient)
// Shapes: x [N,C,H,W], w [K,C,R,S], b [K] (optional), y/dy [N,K,P,Q] with
//   P = (H + 2*pad - R)/stride + 1, Q = (W + 2*pad - S)/stride + 1.
// Parameter gradients dw/db are overwritten, or added to when accumulate is true (gradient
// accumulation over micro-batches). Throws RuntimeError on shape/device/dtype mismatch.
// CPU: oneDNN convolution primitives (src/ops/conv2d.cpp); CUDA: cuDNN (src/ops/conv2d_gpu.cu).
#include "src/ops/op.hpp"

namespace ht {

/// y = conv(x, w) (+ b). Throws RuntimeError on shape/device/dtype mismatch.
void conv2d_forward(OpCachePtr& cache, const Conv2dShape& sh, const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y);
/// dx (skipped when null), dw, db (skipped when null) from x, w, dy.
void conv2d_backward(OpCachePtr& cache, const Conv2dShape& sh, const Tensor& x, const Tensor& w, const Tensor& dy,
                     Tensor* dx, Tensor& dw, Tensor* db, bool accumulate);

/// The device halves of the two functions above, called by them once the arguments are checked (the
/// halves trust their arguments). CPU: src/ops/conv2d.cpp (oneDNN); GPU: src/ops/conv2d_gpu.cu
/// (cuDNN), defined in CUDA builds only (HT_HAVE_CUDA).
void conv2d_forward_cpu(OpCachePtr& cache, const Conv2dShape& sh, const Tensor& x, const Tensor& w, const Tensor* b,
                        Tensor& y);
void conv2d_backward_cpu(OpCachePtr& cache, const Conv2dShape& sh, const Tensor& x, const Tensor& w, const Tensor& dy,
                         Tensor* dx, Tensor& dw, Tensor* db, bool accumulate);
void conv2d_forward_gpu(OpCachePtr& cache, const Conv2dShape& sh, const Tensor& x, const Tensor& w, const Tensor* b,
                        Tensor& y);
void conv2d_backward_gpu(OpCachePtr& cache, const Conv2dShape& sh, const Tensor& x, const Tensor& w, const Tensor& dy,
                         Tensor* dx, Tensor& dw, Tensor* db, bool accumulate);

/// The largest relative difference (2-norm of the pass's result, uniform random data in [-1, 1))
/// a fast convolution algorithm may have from oneDNN's direct convolution for a CPU pass to use it
/// (docs/precision.md#convolution-plans). Direct convolution itself is about 2e-7 from float64: a
/// fast path may be at most about ten times less accurate. (1e-5 let oneDNN's AMX Winograd on a
/// 512-channel 2x2 map through, 2.6e-6, which put ResNet-18's layer4 gradients 20x further from
/// float64 than PyTorch float32's; the same kernels on AVX-512 without AMX stay near 7e-7.)
inline constexpr double kConvFastPathBound = 2e-6;

/// The oneDNN algorithm of each pass of a float32 CPU convolution of shape sh once the fast-path
/// check has run for it ("direct", "winograd" or "auto"; the check runs now if it has not yet).
struct Conv2dCpuPlan {
  std::string forward, backward_data, backward_weights;
};
Conv2dCpuPlan conv2d_cpu_plan(const Conv2dShape& sh);
/// Seconds this process has spent in fast-path checks (their start-up cost).
double conv2d_cpu_check_seconds();

}  // namespace ht
