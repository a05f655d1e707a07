#pragma once
// Own kernels of the convolution (src/ops/conv2d_gpu.cu) in every activation format (src/ops/gpu_common.cuh):
// the filter in the low precision from the float32 master, the float32 filter gradient from
// cuDNN's low-precision one, the bias add and the bias gradient. All run on the compute stream and
// sum in a fixed order (deterministic). Included by src/ops/conv2d_gpu.cu only.
#include "src/ops/gpu_common.cuh"

namespace ht::cuda {

/// w_lp (dtype `dtype`, KRSC when `krsc` else KCRS) = w [K,C,R,S] float32, rounded to nearest even.
void conv_filter_to_lowp(const float* w, void* w_lp, DType dtype, const Conv2dShape& sh, bool krsc);

/// dw [K,C,R,S] float32 (+)= dw_lp (dtype `dtype`, KRSC when `krsc`): overwritten unless accumulate.
void conv_filter_grad_from_lowp(const void* dw_lp, DType dtype, float* dw, const Conv2dShape& sh, bool krsc,
                                bool accumulate);

/// y [N,K,P,Q] in format f (+)= b[k] (float32), each element rounded once to f's dtype.
void conv_bias_add(Tensor& y, const float* b, const Conv2dShape& sh, ActFormat f);

/// db[k] (+)= sum over n, p, q of dy[n, k, p, q] (dy in format f, sums in float32, fixed order).
void conv_bias_grad(const Tensor& dy, float* db, const Conv2dShape& sh, ActFormat f, bool accumulate);

}  // namespace ht::cuda
