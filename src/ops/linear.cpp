#include "src/ops/linear.hpp"

namespace ht {

namespace {
OpArgs linear_args(const char* op, const LinearShape& sh, const Tensor& x, const Tensor& w) {
  OpArgs a(op, x);
  a.require(sh.n > 0 && sh.in > 0 && sh.out > 0, "invalid shape N=" + std::to_string(sh.n) + " in=" +
                                                      std::to_string(sh.in) + " out=" + std::to_string(sh.out));
  a.f32(x, "x", {sh.n, sh.in}).f32(w, "w", {sh.out, sh.in});
  return a;
}
}  // namespace

void linear_forward(OpCachePtr& cache, const LinearShape& sh, const Tensor& x, const Tensor& w, const Tensor* b,
                    Tensor& y) {
  const OpArgs a = linear_args("linear_forward", sh, x, w);
  if (b) a.f32(*b, "b", {sh.out});
  a.f32(y, "y", {sh.n, sh.out});
  HT_DISPATCH(a.device(), "linear_forward", linear.forward, cache, sh, x, w, b, y);
}

void linear_backward(OpCachePtr& cache, const LinearShape& sh, const Tensor& x, const Tensor& w, const Tensor& dy,
                     Tensor* dx, Tensor& dw, Tensor* db, bool accumulate) {
  const OpArgs a = linear_args("linear_backward", sh, x, w);
  a.f32(dy, "dy", {sh.n, sh.out}).f32(dw, "dw", {sh.out, sh.in});
  if (dx) a.f32(*dx, "dx", {sh.n, sh.in});
  if (db) a.f32(*db, "db", {sh.out});
  HT_DISPATCH(a.device(), "linear_backward", linear.backward, cache, sh, x, w, dy, dx, dw, db, accumulate);
}

}  // namespace ht
