#pragma once
// Softmax cross-entropy with optional label smoothing (Szegedy et al. 2016), PyTorch
// F.cross_entropy(logits, labels, label_smoothing=eps) semantics, mean over the batch:
//   target_k = (1-eps)*[k == label] + eps/K,  loss = mean_n( -sum_k target_k * log softmax(z_n)_k )
//   dlogits[n,k] = scale * (softmax(z_n)_k - target_k) / N
// logits [N,K] float32, labels [N] int32 in [0,K), probs [N,K] (saved softmax). `scale` folds in the
// 1/accumulation_steps and any loss scale. Returns the mean loss (double, on the host) and, when
// `correct` is not null, the number of rows whose arg-max equals the label (top-1).
#include "src/ops/op_math.hpp"
#include "src/ops/op.hpp"

namespace ht {

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
