#pragma once
// Element-wise math written once for both devices (HT_HD: __host__ __device__ under nvcc), run by
// the CPU loops in src/ops/*_cpu.cpp and by the CUDA kernels in cuda/*.cu, so CPU tests cover the
// arithmetic the GPU runs. Semantics follow PyTorch (see each op's header in src/ops/).
#include <cmath>
#include <cstdint>

#include "base/hd.hpp"

namespace ht {

// ---- element-wise (src/ops/elementwise.hpp) ----
/// NaN propagates (as in PyTorch), so a poisoned input is detected rather than hidden.
HT_HD float relu_fwd(float x) { return x < 0.f ? 0.f : x; }
/// ReLU gradient from the output (y > 0 exactly where x > 0).
HT_HD float relu_bwd(float y, float dy) { return y > 0.f ? dy : 0.f; }
/// True for NaN and +-Inf. Written as a comparison (NaN compares false) so that it needs no
/// <cmath> overloads on the device; valid without -ffast-math, which this project does not use.
HT_HD bool is_nonfinite(float x) { return !(x <= 3.402823466e38f && x >= -3.402823466e38f); }

// ---- batch normalization (src/ops/batchnorm2d.hpp) ----
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

// ---- softmax cross-entropy (src/ops/softmax_xent.hpp) ----
/// Smoothed target probability of class k in a row whose label is `label`, K classes:
/// (1-eps)*[k == label] + eps/K (PyTorch label_smoothing).
HT_HD float xent_target(int k, int label, float eps, int K) {
  return (k == label ? 1.f - eps : 0.f) + eps / static_cast<float>(K);
}
/// Loss of one row from its log-sum-exp, the label's logit and the sum of its logits:
/// -sum_k target_k * (z_k - lse) = lse - (1-eps)*z_label - (eps/K)*sum_k z_k (the targets sum to 1).
HT_HD double xent_row_loss(double lse, double z_label, double sum_z, float eps, int K) {
  return lse - (1.0 - static_cast<double>(eps)) * z_label - static_cast<double>(eps) / K * sum_z;
}
/// dlogits element: scale_over_n * (softmax_k - target_k), scale_over_n = scale / N.
HT_HD float xent_grad(float prob, float target, float scale_over_n) { return scale_over_n * (prob - target); }

// ---- SGD (src/ops/sgd_update.hpp) ----
/// One element of the SGD update; the CPU loop (src/ops/sgd_update.cpp) and the
/// CUDA kernel (src/ops/sgd_update_gpu.cu) both call it. PyTorch torch.optim.SGD (dampening 0):
/// g = grad + wd*p; buf = momentum*buf + g; g = nesterov ? g + momentum*buf : buf; p -= lr*g.
HT_HD void sgd_update_elem(float& p, float grad, float& buf, float lr, float momentum, float wd, bool nesterov) {
  float g = grad + wd * p;
  buf = momentum * buf + g;
  if (nesterov) g = g + momentum * buf;
  else g = buf;
  p -= lr * g;
}

}  // namespace ht
