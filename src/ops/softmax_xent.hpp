#pragma once
// Softmax cross-entropy with optional label smoothing (Szegedy et al. 2016), PyTorch
// F.cross_entropy(logits, labels, label_smoothing=eps) semantics, mean over the batch:
//   target_k = (1-eps)*[k == label] + eps/K,  loss = mean_n( -sum_k target_k * log softmax(z_n)_k )
//   dlogits[n,k] = scale * (softmax(z_n)_k - target_k) / N
// logits [N,K] float32, labels [N] int32 in [0,K), probs [N,K] (saved softmax). `scale` folds in the
// 1/accumulation_steps and any loss scale. Returns the mean loss (double, on the host) and, when
// `correct` is not null, the number of rows whose arg-max equals the label (top-1).
#include "base/hd.hpp"
#include "src/ops/op.hpp"

namespace ht {

// The row math, one definition run by the CPU half (softmax_xent.cpp) and the CUDA kernel
// (softmax_xent_gpu.cu; HT_HD is __host__ __device__ under nvcc).
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

/// Mean loss over the batch; probs receives the softmax; *correct (when not null) the top-1 hits.
double softmax_xent_forward(const Tensor& logits, const Tensor& labels, float label_smoothing, Tensor& probs,
                            int64_t* correct);
/// dlogits = scale * (probs - target) / N.
void softmax_xent_backward(const Tensor& probs, const Tensor& labels, float label_smoothing, float scale,
                           Tensor& dlogits);

/// The device halves of the functions above, called by them once the arguments are checked (label
/// values are checked by the halves, which read them). CPU: src/ops/softmax_xent.cpp; GPU:
/// src/ops/softmax_xent_gpu.cu, defined in CUDA builds only (HT_HAVE_CUDA).
double softmax_xent_forward_cpu(const Tensor& logits, const Tensor& labels, float label_smoothing, Tensor& probs,
                                int64_t* correct);
void softmax_xent_backward_cpu(const Tensor& probs, const Tensor& labels, float label_smoothing, float scale,
                               Tensor& dlogits);
double softmax_xent_forward_gpu(const Tensor& logits, const Tensor& labels, float label_smoothing, Tensor& probs,
                                int64_t* correct);
void softmax_xent_backward_gpu(const Tensor& probs, const Tensor& labels, float label_smoothing, float scale,
                               Tensor& dlogits);

}  // namespace ht
