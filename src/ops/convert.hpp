#pragma once
// Conversion of an activation between precisions and their memory orders: float32 NCHW <->
// bfloat16/float16 NHWC for 4-D tensors (src/ops/op.hpp), element by element otherwise.
// Rounding to the low precision is round-to-nearest-even with NaN and infinity kept (base/bf16.hpp).
// CPU: one oneDNN reorder per shape (src/ops/convert.cpp); CUDA: src/ops/convert_gpu.cu.
#include "src/ops/op.hpp"

namespace ht {

/// dst = src converted to dst's dtype (float32, bfloat16 or float16; same shape, same device).
/// Throws RuntimeError on a shape, dtype or device mismatch.
void convert_tensor(const Tensor& src, Tensor& dst);
/// The device halves of convert_tensor, called by it once the arguments are checked: CPU
/// src/ops/convert.cpp; GPU src/ops/convert_gpu.cu, defined in CUDA builds only (HT_HAVE_CUDA).
void convert_tensor_cpu(const Tensor& src, Tensor& dst);
void convert_tensor_gpu(const Tensor& src, Tensor& dst);

/// True for the low-precision activation dtypes (bfloat16, float16).
inline bool low_precision(DType t) { return t == DType::bf16 || t == DType::f16; }

}  // namespace ht
