#pragma once
// Pooling, NCHW.
// max pool: y[n,c,p,q] = max over the kernel window (padding counts as -inf), PyTorch MaxPool2d;
//   P = (H + 2*pad - kernel)/stride + 1. Backward routes dy to the arg-max of each window (the
//   implementation keeps what it needs, e.g. oneDNN's workspace, in the cache).
// global average pool: y[n,c] = mean over H,W of x[n,c,:,:]; backward spreads dy/(H*W).
// CPU: oneDNN pooling (max) and own code (global average); CUDA: cuDNN pooling / own kernel.
#include "src/ops/op.hpp"

namespace ht {

/// Max pooling forward. Throws RuntimeError on shape/device/dtype mismatch.
void maxpool2d_forward(OpCachePtr& cache, const PoolShape& sh, const Tensor& x, Tensor& y);
/// Max pooling backward: dx from x, y, dy.
void maxpool2d_backward(OpCachePtr& cache, const PoolShape& sh, const Tensor& x, const Tensor& y, const Tensor& dy,
                        Tensor& dx);
/// x [N,C,H,W] -> y [N,C] (any shape holding N*C elements).
void global_avgpool_forward(OpCachePtr& cache, const Tensor& x, Tensor& y);
/// dy [N,C] -> dx [N,C,H,W] (dx's shape gives H,W).
void global_avgpool_backward(OpCachePtr& cache, const Tensor& dy, Tensor& dx);

/// The device halves of the functions above, called by them once the arguments are checked. CPU:
/// src/ops/pool.cpp (oneDNN max pooling); GPU: src/ops/pool_gpu.cu, defined in CUDA builds only
/// (HT_HAVE_CUDA).
void maxpool2d_forward_cpu(OpCachePtr& cache, const PoolShape& sh, const Tensor& x, Tensor& y);
void maxpool2d_backward_cpu(OpCachePtr& cache, const PoolShape& sh, const Tensor& x, const Tensor& y,
                            const Tensor& dy, Tensor& dx);
void global_avgpool_forward_cpu(OpCachePtr& cache, const Tensor& x, Tensor& y);
void global_avgpool_backward_cpu(OpCachePtr& cache, const Tensor& dy, Tensor& dx);
void maxpool2d_forward_gpu(OpCachePtr& cache, const PoolShape& sh, const Tensor& x, Tensor& y);
void maxpool2d_backward_gpu(OpCachePtr& cache, const PoolShape& sh, const Tensor& x, const Tensor& y,
                            const Tensor& dy, Tensor& dx);
void global_avgpool_forward_gpu(OpCachePtr& cache, const Tensor& x, Tensor& y);
void global_avgpool_backward_gpu(OpCachePtr& cache, const Tensor& dy, Tensor& dx);

}  // namespace ht
