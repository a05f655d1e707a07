#include "src/ops/softmax_xent.hpp"

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
#if defined(HT_HAVE_CUDA)
  return softmax_xent_forward_gpu(logits, labels, label_smoothing, probs, correct);
#else
  no_cuda("softmax_xent_forward");
#endif
}

void softmax_xent_backward(const Tensor& probs, const Tensor& labels, float label_smoothing, float scale,
                           Tensor& dlogits) {
  const OpArgs a = xent_args("softmax_xent_backward", probs, labels, label_smoothing, dlogits);
  if (a.device() == Device::cpu) return softmax_xent_backward_cpu(probs, labels, label_smoothing, scale, dlogits);
#if defined(HT_HAVE_CUDA)
  return softmax_xent_backward_gpu(probs, labels, label_smoothing, scale, dlogits);
#else
  no_cuda("softmax_xent_backward");
#endif
}

}  // namespace ht
