#pragma once
// Conversions between the floating-point dtypes (float32, bfloat16, float16) and between the NCHW
// and NHWC memory orders on the GPU, with the rounding of base/bf16.hpp (nearest even, the
// CPU's own functions): the float32 master weights to their low-precision copies, input batches to
// the low-precision NHWC activations, and back for the loss and for tests. No CUDA types here;
// defined in CUDA builds only (src/ops/convert_gpu.cu), so callers guard with HT_HAVE_CUDA as the op dispatchers do.
#include "base/tensor.hpp"

namespace ht::cuda {

/// dst = src converted to dst's dtype, element by element in memory order (same numel; both on the
/// GPU; f32, bf16 or f16 each). Runs on the compute stream. Throws RuntimeError otherwise.
void convert_elements(const Tensor& src, Tensor& dst);

/// The body of ht::convert_tensor_gpu (src/ops/convert.hpp): dst = src in dst's
/// dtype, same logical shape; the memory order follows the dtype as in cuda::act_format (a 4-D
/// bf16/f16 tensor is NHWC, any other NCHW/row-major), so f32 NCHW <-> bf16 NHWC transposes, a 4-D
/// NHWC tensor into a 2-D one gives the [N, C*H*W] rows in NCHW order (Flatten), and the reverse.
void convert_any(const Tensor& src, Tensor& dst);

/// dst (memory order N,H,W,C) = src (memory order N,C,H,W), converted to dst's dtype; both hold
/// n*c*h*w elements on the GPU. Throws RuntimeError on a size or dtype mismatch.
void nchw_to_nhwc(const Tensor& src, Tensor& dst, int n, int c, int h, int w);

/// dst (memory order N,C,H,W) = src (memory order N,H,W,C), converted to dst's dtype.
void nhwc_to_nchw(const Tensor& src, Tensor& dst, int n, int c, int h, int w);

}  // namespace ht::cuda
