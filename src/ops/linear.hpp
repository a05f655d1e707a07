#pragma once
// Fully connected layer (PyTorch nn.Linear): y[N,out] = x[N,in] * w[out,in]^T + b[out].
// backward: dx[N,in] = dy * w (skipped when null), dw[out,in] = dy^T * x, db[out] = sum_n dy.
// Parameter gradients are overwritten, or added to when accumulate is true.
// CPU: oneDNN inner product; CUDA: cuBLAS GEMM. Throws RuntimeError on mismatched shapes.
#include "src/ops/op.hpp"

namespace ht {

struct LinearShape {
  int n = 0, in = 0, out = 0;
};

namespace cpu {
void linear_forward(OpCachePtr& cache, const LinearShape& sh, const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y);
void linear_backward(OpCachePtr& cache, const LinearShape& sh, const Tensor& x, const Tensor& w, const Tensor& dy,
                     Tensor* dx, Tensor& dw, Tensor* db, bool accumulate);
}  // namespace cpu
namespace cuda {
void linear_forward(OpCachePtr& cache, const LinearShape& sh, const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y);
void linear_backward(OpCachePtr& cache, const LinearShape& sh, const Tensor& x, const Tensor& w, const Tensor& dy,
                     Tensor* dx, Tensor& dw, Tensor* db, bool accumulate);
}  // namespace cuda

inline void linear_forward(OpCachePtr& cache, const LinearShape& sh, const Tensor& x, const Tensor& w, const Tensor* b,
                           Tensor& y) {
  HT_DISPATCH(x.device(), linear_forward, cache, sh, x, w, b, y);
}
inline void linear_backward(OpCachePtr& cache, const LinearShape& sh, const Tensor& x, const Tensor& w,
                            const Tensor& dy, Tensor* dx, Tensor& dw, Tensor* db, bool accumulate) {
  HT_DISPATCH(x.device(), linear_backward, cache, sh, x, w, dy, dx, dw, db, accumulate);
}

}  // namespace ht
