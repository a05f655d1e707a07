#pragma once
// Pooling, NCHW.
// max pool: y[n,c,p,q] = max over the kernel window (padding counts as -inf), PyTorch MaxPool2d;
//   P = (H + 2*pad - kernel)/stride + 1. Backward routes dy to the arg-max of each window (the
//   implementation keeps what it needs, e.g. oneDNN's workspace, in the cache).
// global average pool: y[n,c] = mean over H,W of x[n,c,:,:]; backward spreads dy/(H*W).
// CPU: oneDNN pooling (max) and own code (global average); CUDA: cuDNN pooling / own kernel.
#include "src/ops/op.hpp"

namespace ht {

struct PoolShape {
  int n = 0, c = 0, h = 0, w = 0;
  int kernel = 2, stride = 2, pad = 0;
  int p() const { return (h + 2 * pad - kernel) / stride + 1; }
  int q() const { return (w + 2 * pad - kernel) / stride + 1; }
};

namespace cpu {
void maxpool2d_forward(OpCachePtr& cache, const PoolShape& sh, const Tensor& x, Tensor& y);
void maxpool2d_backward(OpCachePtr& cache, const PoolShape& sh, const Tensor& x, const Tensor& y, const Tensor& dy,
                        Tensor& dx);
void global_avgpool_forward(OpCachePtr& cache, const Tensor& x, Tensor& y);
void global_avgpool_backward(OpCachePtr& cache, const Tensor& dy, Tensor& dx);
}  // namespace cpu
namespace cuda {
void maxpool2d_forward(OpCachePtr& cache, const PoolShape& sh, const Tensor& x, Tensor& y);
void maxpool2d_backward(OpCachePtr& cache, const PoolShape& sh, const Tensor& x, const Tensor& y, const Tensor& dy,
                        Tensor& dx);
void global_avgpool_forward(OpCachePtr& cache, const Tensor& x, Tensor& y);
void global_avgpool_backward(OpCachePtr& cache, const Tensor& dy, Tensor& dx);
}  // namespace cuda

inline void maxpool2d_forward(OpCachePtr& cache, const PoolShape& sh, const Tensor& x, Tensor& y) {
  HT_DISPATCH(x.device(), maxpool2d_forward, cache, sh, x, y);
}
inline void maxpool2d_backward(OpCachePtr& cache, const PoolShape& sh, const Tensor& x, const Tensor& y,
                               const Tensor& dy, Tensor& dx) {
  HT_DISPATCH(x.device(), maxpool2d_backward, cache, sh, x, y, dy, dx);
}
/// x [N,C,H,W] -> y [N,C].
inline void global_avgpool_forward(OpCachePtr& cache, const Tensor& x, Tensor& y) {
  HT_DISPATCH(x.device(), global_avgpool_forward, cache, x, y);
}
/// dy [N,C] -> dx [N,C,H,W] (dx's shape gives H,W).
inline void global_avgpool_backward(OpCachePtr& cache, const Tensor& dy, Tensor& dx) {
  HT_DISPATCH(dy.device(), global_avgpool_backward, cache, dy, dx);
}

}  // namespace ht
