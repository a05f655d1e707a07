#include "src/ops/linear.hpp"

#include "src/ops/weighted_op_args.hpp"

namespace ht {

namespace {
struct LinearDims {
  using Shape = LinearShape;
  static constexpr bool kSameDtypeY = false;  // y (and dy) may be float32 for low-precision x
  static bool valid(const Shape& sh) { return sh.n > 0 && sh.in > 0 && sh.out > 0; }
  static std::string describe(const Shape& sh) {
    return "N=" + std::to_string(sh.n) + " in=" + std::to_string(sh.in) + " out=" + std::to_string(sh.out);
  }
  static std::vector<int64_t> x(const Shape& sh) { return {sh.n, sh.in}; }
  static std::vector<int64_t> w(const Shape& sh) { return {sh.out, sh.in}; }
  static std::vector<int64_t> y(const Shape& sh) { return {sh.n, sh.out}; }
  static std::vector<int64_t> b(const Shape& sh) { return {sh.out}; }
};
}  // namespace

void linear_forward(OpCachePtr& cache, const LinearShape& sh, const Tensor& x, const Tensor& w, const Tensor* b,
                    Tensor& y) {
  const OpArgs a = weighted_forward_args<LinearDims>("linear_forward", sh, x, w, b, y);
  if (a.device() == Device::cpu) return linear_forward_cpu(cache, sh, x, w, b, y);
#if defined(HT_HAVE_CUDA)
  return linear_forward_gpu(cache, sh, x, w, b, y);
#else
  no_cuda("linear_forward");
#endif
}

void linear_backward(OpCachePtr& cache, const LinearShape& sh, const Tensor& x, const Tensor& w, const Tensor& dy,
                     Tensor* dx, Tensor& dw, Tensor* db, bool accumulate) {
  const OpArgs a = weighted_backward_args<LinearDims>("linear_backward", sh, x, w, dy, dx, dw, db);
  if (a.device() == Device::cpu) return linear_backward_cpu(cache, sh, x, w, dy, dx, dw, db, accumulate);
#if defined(HT_HAVE_CUDA)
  return linear_backward_gpu(cache, sh, x, w, dy, dx, dw, db, accumulate);
#else
  no_cuda("linear_backward");
#endif
}

}  // namespace ht
