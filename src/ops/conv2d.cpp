#include "src/ops/conv2d.hpp"

namespace ht {

namespace {
OpArgs conv2d_args(const char* op, const Conv2dShape& sh, const Tensor& x, const Tensor& w) {
  OpArgs a(op, x);
  a.require(sh.n > 0 && sh.c > 0 && sh.h > 0 && sh.w > 0 && sh.k > 0 && sh.r > 0 && sh.s > 0 && sh.stride > 0 &&
                sh.pad >= 0 && sh.p() > 0 && sh.q() > 0,
            "invalid shape N=" + std::to_string(sh.n) + " C=" + std::to_string(sh.c) + " H=" + std::to_string(sh.h) +
                " W=" + std::to_string(sh.w) + " K=" + std::to_string(sh.k) + " R=" + std::to_string(sh.r) +
                " S=" + std::to_string(sh.s) + " stride=" + std::to_string(sh.stride) + " pad=" + std::to_string(sh.pad));
  a.f32(x, "x", {sh.n, sh.c, sh.h, sh.w}).f32(w, "w", {sh.k, sh.c, sh.r, sh.s});
  return a;
}
}  // namespace

void conv2d_forward(OpCachePtr& cache, const Conv2dShape& sh, const Tensor& x, const Tensor& w, const Tensor* b,
                    Tensor& y) {
  const OpArgs a = conv2d_args("conv2d_forward", sh, x, w);
  if (b) a.f32(*b, "b", {sh.k});
  a.f32(y, "y", {sh.n, sh.k, sh.p(), sh.q()});
  HT_DISPATCH(a.device(), "conv2d_forward", conv2d.forward, cache, sh, x, w, b, y);
}

void conv2d_backward(OpCachePtr& cache, const Conv2dShape& sh, const Tensor& x, const Tensor& w, const Tensor& dy,
                     Tensor* dx, Tensor& dw, Tensor* db, bool accumulate) {
  const OpArgs a = conv2d_args("conv2d_backward", sh, x, w);
  a.f32(dy, "dy", {sh.n, sh.k, sh.p(), sh.q()}).f32(dw, "dw", {sh.k, sh.c, sh.r, sh.s});
  if (dx) a.f32(*dx, "dx", {sh.n, sh.c, sh.h, sh.w});
  if (db) a.f32(*db, "db", {sh.k});
  HT_DISPATCH(a.device(), "conv2d_backward", conv2d.backward, cache, sh, x, w, dy, dx, dw, db, accumulate);
}

}  // namespace ht
