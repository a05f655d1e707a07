#pragma once
// Batch normalization over N,H,W per channel (Ioffe & Szegedy 2015), PyTorch BatchNorm2d semantics:
//   training:  y = gamma * (x - mean_b) / sqrt(var_b + eps) + beta, with biased batch variance;
//              running_mean = (1-momentum)*running_mean + momentum*mean_b,
//              running_var  = (1-momentum)*running_var  + momentum*var_b * M/(M-1), M = N*H*W
//              (unbiased, as PyTorch). save_mean/save_invstd [C] keep mean_b and 1/sqrt(var_b+eps)
//              for backward.
//   inference: y = gamma * (x - running_mean) / sqrt(running_var + eps) + beta.
//   backward:  dx, dgamma, dbeta from x, dy and the saved statistics (training mode formula).
// Shapes: x, y, dy, dx [N,C,H,W]; gamma, beta, running_*, save_* [C]. Parameter gradients are
// overwritten, or added to when accumulate is true. CPU: oneDNN; CUDA: cuDNN.
#include "src/ops/op.hpp"

namespace ht {

/// Training-mode forward: y, updated running statistics, and save_mean/save_invstd for backward.
void batchnorm2d_forward_train(OpCachePtr& cache, const BatchNormShape& sh, const Tensor& x, const Tensor& gamma,
                               const Tensor& beta, Tensor& y, Tensor& running_mean, Tensor& running_var,
                               Tensor& save_mean, Tensor& save_invstd);
/// Inference-mode forward from the running statistics.
void batchnorm2d_forward_infer(OpCachePtr& cache, const BatchNormShape& sh, const Tensor& x, const Tensor& gamma,
                               const Tensor& beta, const Tensor& running_mean, const Tensor& running_var, Tensor& y);
/// dx, dgamma, dbeta from x, dy and the saved statistics.
void batchnorm2d_backward(OpCachePtr& cache, const BatchNormShape& sh, const Tensor& x, const Tensor& dy,
                          const Tensor& gamma, const Tensor& save_mean, const Tensor& save_invstd, Tensor& dx,
                          Tensor& dgamma, Tensor& dbeta, bool accumulate);

/// The device halves of the functions above, called by them once the arguments are checked. CPU:
/// src/ops/batchnorm2d.cpp (oneDNN); GPU: src/ops/batchnorm2d_gpu.cu (cuDNN), defined in CUDA
/// builds only (HT_HAVE_CUDA).
void batchnorm2d_forward_train_cpu(OpCachePtr& cache, const BatchNormShape& sh, const Tensor& x, const Tensor& gamma,
                                   const Tensor& beta, Tensor& y, Tensor& running_mean, Tensor& running_var,
                                   Tensor& save_mean, Tensor& save_invstd);
void batchnorm2d_forward_infer_cpu(OpCachePtr& cache, const BatchNormShape& sh, const Tensor& x, const Tensor& gamma,
                                   const Tensor& beta, const Tensor& running_mean, const Tensor& running_var,
                                   Tensor& y);
void batchnorm2d_backward_cpu(OpCachePtr& cache, const BatchNormShape& sh, const Tensor& x, const Tensor& dy,
                              const Tensor& gamma, const Tensor& save_mean, const Tensor& save_invstd, Tensor& dx,
                              Tensor& dgamma, Tensor& dbeta, bool accumulate);
void batchnorm2d_forward_train_gpu(OpCachePtr& cache, const BatchNormShape& sh, const Tensor& x, const Tensor& gamma,
                                   const Tensor& beta, Tensor& y, Tensor& running_mean, Tensor& running_var,
                                   Tensor& save_mean, Tensor& save_invstd);
void batchnorm2d_forward_infer_gpu(OpCachePtr& cache, const BatchNormShape& sh, const Tensor& x, const Tensor& gamma,
                                   const Tensor& beta, const Tensor& running_mean, const Tensor& running_var,
                                   Tensor& y);
void batchnorm2d_backward_gpu(OpCachePtr& cache, const BatchNormShape& sh, const Tensor& x, const Tensor& dy,
                              const Tensor& gamma, const Tensor& save_mean, const Tensor& save_invstd, Tensor& dx,
                              Tensor& dgamma, Tensor& dbeta, bool accumulate);

}  // namespace ht
