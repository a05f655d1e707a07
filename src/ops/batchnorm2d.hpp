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
#include <cmath>
#include <cstdint>

#include "src/base/hd.hpp"
#include "src/ops/op.hpp"

namespace ht {

struct BatchNormShape {
  int n = 0, c = 0, h = 0, w = 0;
  float eps = 1e-5f;
  float momentum = 0.1f;
};

/// 1/sqrt(var + eps) from the biased batch variance (what save_invstd holds).
HT_HD float bn_invstd(double var, float eps) { return static_cast<float>(1.0 / sqrt(var + static_cast<double>(eps))); }
/// PyTorch running-mean update: (1-momentum)*running + momentum*batch_mean.
HT_HD float bn_running_mean(float running, double batch_mean, float momentum) {
  return static_cast<float>((1.0 - momentum) * running + static_cast<double>(momentum) * batch_mean);
}
/// PyTorch running-variance update with the unbiased batch variance: m = N*H*W values per channel
/// (m > 1), var the biased batch variance.
HT_HD float bn_running_var(float running, double var, float momentum, int64_t m) {
  return static_cast<float>((1.0 - momentum) * running +
                            static_cast<double>(momentum) * var * static_cast<double>(m) / static_cast<double>(m - 1));
}

namespace cpu {
void batchnorm2d_forward_train(OpCachePtr& cache, const BatchNormShape& sh, const Tensor& x, const Tensor& gamma,
                               const Tensor& beta, Tensor& y, Tensor& running_mean, Tensor& running_var,
                               Tensor& save_mean, Tensor& save_invstd);
void batchnorm2d_forward_infer(OpCachePtr& cache, const BatchNormShape& sh, const Tensor& x, const Tensor& gamma,
                               const Tensor& beta, const Tensor& running_mean, const Tensor& running_var, Tensor& y);
void batchnorm2d_backward(OpCachePtr& cache, const BatchNormShape& sh, const Tensor& x, const Tensor& dy,
                          const Tensor& gamma, const Tensor& save_mean, const Tensor& save_invstd, Tensor& dx,
                          Tensor& dgamma, Tensor& dbeta, bool accumulate);
}  // namespace cpu
namespace cuda {
void batchnorm2d_forward_train(OpCachePtr& cache, const BatchNormShape& sh, const Tensor& x, const Tensor& gamma,
                               const Tensor& beta, Tensor& y, Tensor& running_mean, Tensor& running_var,
                               Tensor& save_mean, Tensor& save_invstd);
void batchnorm2d_forward_infer(OpCachePtr& cache, const BatchNormShape& sh, const Tensor& x, const Tensor& gamma,
                               const Tensor& beta, const Tensor& running_mean, const Tensor& running_var, Tensor& y);
void batchnorm2d_backward(OpCachePtr& cache, const BatchNormShape& sh, const Tensor& x, const Tensor& dy,
                          const Tensor& gamma, const Tensor& save_mean, const Tensor& save_invstd, Tensor& dx,
                          Tensor& dgamma, Tensor& dbeta, bool accumulate);
}  // namespace cuda

inline void batchnorm2d_forward_train(OpCachePtr& cache, const BatchNormShape& sh, const Tensor& x,
                                      const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& running_mean,
                                      Tensor& running_var, Tensor& save_mean, Tensor& save_invstd) {
  HT_DISPATCH(x.device(), batchnorm2d_forward_train, cache, sh, x, gamma, beta, y, running_mean, running_var,
              save_mean, save_invstd);
}
inline void batchnorm2d_forward_infer(OpCachePtr& cache, const BatchNormShape& sh, const Tensor& x,
                                      const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                                      const Tensor& running_var, Tensor& y) {
  HT_DISPATCH(x.device(), batchnorm2d_forward_infer, cache, sh, x, gamma, beta, running_mean, running_var, y);
}
inline void batchnorm2d_backward(OpCachePtr& cache, const BatchNormShape& sh, const Tensor& x, const Tensor& dy,
                                 const Tensor& gamma, const Tensor& save_mean, const Tensor& save_invstd,
                                 Tensor& dx, Tensor& dgamma, Tensor& dbeta, bool accumulate) {
  HT_DISPATCH(x.device(), batchnorm2d_backward, cache, sh, x, dy, gamma, save_mean, save_invstd, dx, dgamma, dbeta,
              accumulate);
}

}  // namespace ht
