#include "src/ops/elementwise.hpp"

namespace ht {

void relu_forward(const Tensor& x, Tensor& y) {
  const OpArgs a("relu_forward", x);
  a.act(x, "x").act(y, "y").same_dtype(x, "x", y, "y").same_numel(x, "x", y, "y");
  if (a.device() == Device::cpu) return relu_forward_cpu(x, y);
#if defined(HT_HAVE_CUDA)
  return relu_forward_gpu(x, y);
#else
  no_cuda("relu_forward");
#endif
}

void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  const OpArgs a("relu_backward", y);
  a.act(y, "y").act(dy, "dy").act(dx, "dx").same_dtype(y, "y", dy, "dy").same_dtype(y, "y", dx, "dx").same_numel(y, "y", dy, "dy").same_numel(y, "y", dx, "dx");
  if (a.device() == Device::cpu) return relu_backward_cpu(y, dy, dx);
#if defined(HT_HAVE_CUDA)
  return relu_backward_gpu(y, dy, dx);
#else
  no_cuda("relu_backward");
#endif
}

void add_forward(const Tensor& a_, const Tensor& b, Tensor& y) {
  const OpArgs a("add_forward", a_);
  a.act(a_, "a").act(b, "b").act(y, "y").same_dtype(a_, "a", b, "b").same_dtype(a_, "a", y, "y").same_numel(a_, "a", b, "b").same_numel(a_, "a", y, "y");
  if (a.device() == Device::cpu) return add_forward_cpu(a_, b, y);
#if defined(HT_HAVE_CUDA)
  return add_forward_gpu(a_, b, y);
#else
  no_cuda("add_forward");
#endif
}

void add_inplace(Tensor& y, const Tensor& x) {
  const OpArgs a("add_inplace", y);
  a.f32(y, "y").f32(x, "x").same_numel(y, "y", x, "x");
  if (a.device() == Device::cpu) return add_inplace_cpu(y, x);
#if defined(HT_HAVE_CUDA)
  return add_inplace_gpu(y, x);
#else
  no_cuda("add_inplace");
#endif
}

void scale_inplace(Tensor& y, float s) {
  const OpArgs a("scale_inplace", y);
  a.f32(y, "y");
  if (a.device() == Device::cpu) return scale_inplace_cpu(y, s);
#if defined(HT_HAVE_CUDA)
  return scale_inplace_gpu(y, s);
#else
  no_cuda("scale_inplace");
#endif
}

int64_t count_nonfinite(const Tensor& x) {
  const OpArgs a("count_nonfinite", x);
  a.f32(x, "x");
  if (a.device() == Device::cpu) return count_nonfinite_cpu(x);
#if defined(HT_HAVE_CUDA)
  return count_nonfinite_gpu(x);
#else
  no_cuda("count_nonfinite");
#endif
}

}  // namespace ht
