#pragma once
// Fully connected layer (PyTorch nn.Linear): y[N,out] = x[N,in] * w[out,in]^T + b[out].
// backward: dx[N,in] = dy * w (skipped when null), dw[out,in] = dy^T * x, db[out] = sum_n dy.
// Parameter gradients are overwritten, or added to when accumulate is true.
// CPU: oneDNN inner product; CUDA: cuBLAS GEMM. Throws RuntimeError on mismatched shapes.
#include "src/ops/op.hpp"

namespace ht {

/// y = x w^T (+ b). Throws RuntimeError on shape/device/dtype mismatch.
void linear_forward(OpCachePtr& cache, const LinearShape& sh, const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y);
/// dx (skipped when null), dw, db (skipped when null) from x, w, dy.
void linear_backward(OpCachePtr& cache, const LinearShape& sh, const Tensor& x, const Tensor& w, const Tensor& dy,
                     Tensor* dx, Tensor& dw, Tensor* db, bool accumulate);

/// The device halves of the two functions above, called by them once the arguments are checked (the
/// halves trust their arguments). CPU: src/ops/linear.cpp (oneDNN); GPU: src/ops/linear_gpu.cu
/// (cuBLAS), defined in CUDA builds only (HT_HAVE_CUDA).
void linear_forward_cpu(OpCachePtr& cache, const LinearShape& sh, const Tensor& x, const Tensor& w, const Tensor* b,
                        Tensor& y);
void linear_backward_cpu(OpCachePtr& cache, const LinearShape& sh, const Tensor& x, const Tensor& w, const Tensor& dy,
                         Tensor* dx, Tensor& dw, Tensor* db, bool accumulate);
void linear_forward_gpu(OpCachePtr& cache, const LinearShape& sh, const Tensor& x, const Tensor& w, const Tensor* b,
                        Tensor& y);
void linear_backward_gpu(OpCachePtr& cache, const LinearShape& sh, const Tensor& x, const Tensor& w, const Tensor& dy,
                         Tensor* dx, Tensor& dw, Tensor* db, bool accumulate);

}  // namespace ht
