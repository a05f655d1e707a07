// softmax_xent: the dispatcher (arguments checked once, then this file's CPU half or the GPU half in
// src/ops/softmax_xent_gpu.cu, CUDA builds only) and the CPU half.
#include "src/ops/softmax_xent.hpp"

#include <cmath>
#include <string>

namespace ht {

namespace {
/// z [N,K] float32 (logits or probs), labels [N] int32, out the size of z, eps in [0, 1]. Label
/// values are checked by the halves, which read them.
OpArgs xent_args(const char* op, const Tensor& z, const Tensor& labels, float eps, const Tensor& out) {
  OpArgs a(op, z);
  a.f32(z, "logits/probs").f32(out, "output").i32(labels, "labels");
  a.require(z.ndim() == 2, [&] { return std::string("logits/probs must be [N,K], got " + z.shape_str()); });
  a.require(z.dim(0) > 0 && z.dim(1) > 0, [&] { return std::string("empty logits " + z.shape_str()); });
  a.require(labels.numel() == z.dim(0),
            [&] { return std::string("labels " + labels.shape_str() + " do not match " + z.shape_str()); });
  a.require(out.numel() == z.numel(),
            [&] { return std::string("output " + out.shape_str() + " does not match " + z.shape_str()); });
  a.require(eps >= 0.f && eps <= 1.f,
            [&] { return std::string("label_smoothing " + std::to_string(eps) + " is outside [0, 1]"); });
  return a;
}
}  // namespace

double softmax_xent_forward(const Tensor& logits, const Tensor& labels, float label_smoothing, Tensor& probs,
                            int64_t* correct) {
  const OpArgs a = xent_args("softmax_xent_forward", logits, labels, label_smoothing, probs);
  if (a.device() == Device::cpu) return softmax_xent_forward_cpu(logits, labels, label_smoothing, probs, correct);
  if constexpr (kHaveCuda) return softmax_xent_forward_gpu(logits, labels, label_smoothing, probs, correct);
  no_cuda("softmax_xent_forward");
}

void softmax_xent_backward(const Tensor& probs, const Tensor& labels, float label_smoothing, float scale,
                           Tensor& dlogits) {
  const OpArgs a = xent_args("softmax_xent_backward", probs, labels, label_smoothing, dlogits);
  if (a.device() == Device::cpu) return softmax_xent_backward_cpu(probs, labels, label_smoothing, scale, dlogits);
  if constexpr (kHaveCuda) return softmax_xent_backward_gpu(probs, labels, label_smoothing, scale, dlogits);
  no_cuda("softmax_xent_backward");
}

}  // namespace ht

// ---- The CPU half ----
// CPU softmax cross-entropy: one pass per row (max, exp, sum, log-sum-exp), rows split across
// OpenMP threads when the batch is large. The loss and arithmetic of the target/gradient are the
// HT_HD functions of softmax_xent.hpp, shared with the CUDA kernel.
namespace ht {
namespace {

// Rows x classes below which a parallel region costs more than it saves.
constexpr int64_t kParallelMin = 1 << 14;

void check_labels(const char* op, const int32_t* lab, int64_t n, int k) {
  for (int64_t i = 0; i < n; ++i)
    if (lab[i] < 0 || lab[i] >= k)
      throw RuntimeError(std::string(op) + ": label " + std::to_string(lab[i]) + " of row " + std::to_string(i) +
                         " is outside [0, " + std::to_string(k) + ")");
}

}  // namespace

// The CPU half: the functions declared in src/ops/softmax_xent.hpp.
double softmax_xent_forward_cpu(const Tensor& logits, const Tensor& labels, float label_smoothing, Tensor& probs,
                            int64_t* correct) {
  const int64_t n = logits.dim(0);
  const int k = static_cast<int>(logits.dim(1));
  const float* z = logits.data<float>();
  const int32_t* lab = labels.data<int32_t>();
  float* p = probs.data<float>();
  check_labels("softmax_xent_forward", lab, n, k);

  double loss_sum = 0;
  int64_t right = 0;
#pragma omp parallel for if (n * k >= kParallelMin) schedule(static) reduction(+ : loss_sum, right)
  for (int64_t i = 0; i < n; ++i) {
    const float* zr = z + i * k;
    float* pr = p + i * k;
    float m = zr[0];
    int arg = 0;
    for (int j = 1; j < k; ++j)
      if (zr[j] > m) { m = zr[j]; arg = j; }  // first maximum, as torch.argmax
    double s = 0, sum_z = 0;
    for (int j = 0; j < k; ++j) {
      const float e = std::exp(zr[j] - m);
      pr[j] = e;
      s += e;
      sum_z += zr[j];
    }
    const float inv = static_cast<float>(1.0 / s);
    for (int j = 0; j < k; ++j) pr[j] *= inv;
    const double lse = m + std::log(s);
    loss_sum += xent_row_loss(lse, zr[lab[i]], sum_z, label_smoothing, k);
    right += (arg == lab[i]) ? 1 : 0;
  }
  if (correct) *correct = right;
  return loss_sum / static_cast<double>(n);
}

void softmax_xent_backward_cpu(const Tensor& probs, const Tensor& labels, float label_smoothing, float scale,
                           Tensor& dlogits) {
  const int64_t n = probs.dim(0);
  const int k = static_cast<int>(probs.dim(1));
  const float* p = probs.data<float>();
  const int32_t* lab = labels.data<int32_t>();
  float* d = dlogits.data<float>();  // may alias p: each element is read before it is written
  check_labels("softmax_xent_backward", lab, n, k);
  const float s_over_n = static_cast<float>(static_cast<double>(scale) / static_cast<double>(n));
#pragma omp parallel for if (n * k >= kParallelMin) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const int label = lab[i];
    for (int j = 0; j < k; ++j) d[i * k + j] = xent_grad(p[i * k + j], xent_target(j, label, label_smoothing, k), s_over_n);
  }
}

}  // namespace ht
