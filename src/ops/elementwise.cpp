#include "src/ops/elementwise.hpp"

namespace ht {

void relu_forward(const Tensor& x, Tensor& y) {
  const OpArgs a("relu_forward", x);
  a.act(x, "x").act(y, "y").same_dtype(x, "x", y, "y").same_numel(x, "x", y, "y");
  HT_DISPATCH(a.device(), "relu_forward", elementwise.relu_forward, x, y);
}

void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  const OpArgs a("relu_backward", y);
  a.act(y, "y").act(dy, "dy").act(dx, "dx").same_dtype(y, "y", dy, "dy").same_dtype(y, "y", dx, "dx").same_numel(y, "y", dy, "dy").same_numel(y, "y", dx, "dx");
  HT_DISPATCH(a.device(), "relu_backward", elementwise.relu_backward, y, dy, dx);
}

void add_forward(const Tensor& a_, const Tensor& b, Tensor& y) {
  const OpArgs a("add_forward", a_);
  a.act(a_, "a").act(b, "b").act(y, "y").same_dtype(a_, "a", b, "b").same_dtype(a_, "a", y, "y").same_numel(a_, "a", b, "b").same_numel(a_, "a", y, "y");
  HT_DISPATCH(a.device(), "add_forward", elementwise.add_forward, a_, b, y);
}

void add_inplace(Tensor& y, const Tensor& x) {
  const OpArgs a("add_inplace", y);
  a.f32(y, "y").f32(x, "x").same_numel(y, "y", x, "x");
  HT_DISPATCH(a.device(), "add_inplace", elementwise.add_inplace, y, x);
}

void scale_inplace(Tensor& y, float s) {
  const OpArgs a("scale_inplace", y);
  a.f32(y, "y");
  HT_DISPATCH(a.device(), "scale_inplace", elementwise.scale_inplace, y, s);
}

int64_t count_nonfinite(const Tensor& x) {
  const OpArgs a("count_nonfinite", x);
  a.f32(x, "x");
  return HT_DISPATCH(a.device(), "count_nonfinite", elementwise.count_nonfinite, x);
}

}  // namespace ht
