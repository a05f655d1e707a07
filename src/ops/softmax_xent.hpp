#pragma once
// Softmax cross-entropy with optional label smoothing (Szegedy et al. 2016), PyTorch
// F.cross_entropy(logits, labels, label_smoothing=eps) semantics, mean over the batch:
//   target_k = (1-eps)*[k == label] + eps/K,  loss = mean_n( -sum_k target_k * log softmax(z_n)_k )
//   dlogits[n,k] = scale * (softmax(z_n)_k - target_k) / N
// logits [N,K] float32, labels [N] int32 in [0,K), probs [N,K] (saved softmax). `scale` folds in the
// 1/accumulation_steps and any loss scale. Returns the mean loss (double, on the host) and, when
// `correct` is not null, the number of rows whose arg-max equals the label (top-1).
#include "src/base/hd.hpp"
#include "src/ops/op.hpp"

namespace ht {

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

namespace cpu {
double softmax_xent_forward(const Tensor& logits, const Tensor& labels, float label_smoothing, Tensor& probs,
                            int64_t* correct);
void softmax_xent_backward(const Tensor& probs, const Tensor& labels, float label_smoothing, float scale,
                           Tensor& dlogits);
}  // namespace cpu
namespace cuda {
double softmax_xent_forward(const Tensor& logits, const Tensor& labels, float label_smoothing, Tensor& probs,
                            int64_t* correct);
void softmax_xent_backward(const Tensor& probs, const Tensor& labels, float label_smoothing, float scale,
                           Tensor& dlogits);
}  // namespace cuda

inline double softmax_xent_forward(const Tensor& logits, const Tensor& labels, float label_smoothing, Tensor& probs,
                                   int64_t* correct) {
  if (logits.device() == Device::cpu) return cpu::softmax_xent_forward(logits, labels, label_smoothing, probs, correct);
#if defined(HT_HAVE_CUDA)
  return cuda::softmax_xent_forward(logits, labels, label_smoothing, probs, correct);
#else
  throw RuntimeError("softmax_xent_forward: this hpctrain was built without CUDA");
#endif
}
inline void softmax_xent_backward(const Tensor& probs, const Tensor& labels, float label_smoothing, float scale,
                                  Tensor& dlogits) {
  HT_DISPATCH(probs.device(), softmax_xent_backward, probs, labels, label_smoothing, scale, dlogits);
}

}  // namespace ht
