#include "src/ops/conv2d.hpp"

#include "src/ops/weighted_op_args.hpp"

namespace ht {

namespace {
struct Conv2dDims {
  using Shape = Conv2dShape;
  static constexpr bool kSameDtypeY = true;
  static bool valid(const Shape& sh) {
    return sh.n > 0 && sh.c > 0 && sh.h > 0 && sh.w > 0 && sh.k > 0 && sh.r > 0 && sh.s > 0 && sh.stride > 0 &&
           sh.pad >= 0 && sh.p() > 0 && sh.q() > 0;
  }
  static std::string describe(const Shape& sh) {
    return "N=" + std::to_string(sh.n) + " C=" + std::to_string(sh.c) + " H=" + std::to_string(sh.h) +
           " W=" + std::to_string(sh.w) + " K=" + std::to_string(sh.k) + " R=" + std::to_string(sh.r) +
           " S=" + std::to_string(sh.s) + " stride=" + std::to_string(sh.stride) + " pad=" + std::to_string(sh.pad);
  }
  static std::vector<int64_t> x(const Shape& sh) { return {sh.n, sh.c, sh.h, sh.w}; }
  static std::vector<int64_t> w(const Shape& sh) { return {sh.k, sh.c, sh.r, sh.s}; }
  static std::vector<int64_t> y(const Shape& sh) { return {sh.n, sh.k, sh.p(), sh.q()}; }
  static std::vector<int64_t> b(const Shape& sh) { return {sh.k}; }
};
}  // namespace

void conv2d_forward(OpCachePtr& cache, const Conv2dShape& sh, const Tensor& x, const Tensor& w, const Tensor* b,
                    Tensor& y) {
  const OpArgs a = weighted_forward_args<Conv2dDims>("conv2d_forward", sh, x, w, b, y);
  if (a.device() == Device::cpu) return conv2d_forward_cpu(cache, sh, x, w, b, y);
#if defined(HT_HAVE_CUDA)
  return conv2d_forward_gpu(cache, sh, x, w, b, y);
#else
  no_cuda("conv2d_forward");
#endif
}

void conv2d_backward(OpCachePtr& cache, const Conv2dShape& sh, const Tensor& x, const Tensor& w, const Tensor& dy,
                     Tensor* dx, Tensor& dw, Tensor* db, bool accumulate) {
  const OpArgs a = weighted_backward_args<Conv2dDims>("conv2d_backward", sh, x, w, dy, dx, dw, db);
  if (a.device() == Device::cpu) return conv2d_backward_cpu(cache, sh, x, w, dy, dx, dw, db, accumulate);
#if defined(HT_HAVE_CUDA)
  return conv2d_backward_gpu(cache, sh, x, w, dy, dx, dw, db, accumulate);
#else
  no_cuda("conv2d_backward");
#endif
}

}  // namespace ht
