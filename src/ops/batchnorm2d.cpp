#include "src/ops/batchnorm2d.hpp"

namespace ht {

namespace {
/// x [N,C,H,W] and the shape; per-channel tensors are checked with channel().
OpArgs bn_args(const char* op, const BatchNormShape& sh, const Tensor& x) {
  OpArgs a(op, x);
  a.require(sh.n > 0 && sh.c > 0 && sh.h > 0 && sh.w > 0, [&] {
    return std::string("empty shape [" + std::to_string(sh.n) + ", " + std::to_string(sh.c) + ", " +
                       std::to_string(sh.h) + ", " + std::to_string(sh.w) + "]");
  });
  a.require(sh.eps > 0.f, [&] { return std::string("eps " + std::to_string(sh.eps) + " must be positive"); });
  a.act(x, "x", {sh.n, sh.c, sh.h, sh.w});
  return a;
}

/// A per-channel tensor: float32, C elements (any shape, e.g. [C] views into a flat buffer).
void channel(const OpArgs& a, const BatchNormShape& sh, const Tensor& t, const char* name) {
  a.f32(t, name).require(t.numel() == sh.c, [&] {
    return std::string(std::string(name) + " " + t.shape_str() + " must have C = " + std::to_string(sh.c) +
                       " elements");
  });
}
}  // namespace

void batchnorm2d_forward_train(OpCachePtr& cache, const BatchNormShape& sh, const Tensor& x, const Tensor& gamma,
                               const Tensor& beta, Tensor& y, Tensor& running_mean, Tensor& running_var,
                               Tensor& save_mean, Tensor& save_invstd) {
  const OpArgs a = bn_args("batchnorm2d_forward_train", sh, x);
  const int64_t m = int64_t{sh.n} * sh.h * sh.w;
  a.require(m > 1, [&] {
    return std::string("training needs more than one value per channel (N*H*W = " + std::to_string(m) + ")");
  });
  a.act(y, "y", {sh.n, sh.c, sh.h, sh.w}).same_dtype(x, "x", y, "y");
  channel(a, sh, gamma, "gamma");
  channel(a, sh, beta, "beta");
  channel(a, sh, running_mean, "running_mean");
  channel(a, sh, running_var, "running_var");
  channel(a, sh, save_mean, "save_mean");
  channel(a, sh, save_invstd, "save_invstd");
  if (a.device() == Device::cpu)
    return batchnorm2d_forward_train_cpu(cache, sh, x, gamma, beta, y, running_mean, running_var, save_mean,
                                         save_invstd);
#if defined(HT_HAVE_CUDA)
  return batchnorm2d_forward_train_gpu(cache, sh, x, gamma, beta, y, running_mean, running_var, save_mean,
                                       save_invstd);
#else
  no_cuda("batchnorm2d_forward_train");
#endif
}

void batchnorm2d_forward_infer(OpCachePtr& cache, const BatchNormShape& sh, const Tensor& x, const Tensor& gamma,
                               const Tensor& beta, const Tensor& running_mean, const Tensor& running_var, Tensor& y) {
  const OpArgs a = bn_args("batchnorm2d_forward_infer", sh, x);
  a.act(y, "y", {sh.n, sh.c, sh.h, sh.w}).same_dtype(x, "x", y, "y");
  channel(a, sh, gamma, "gamma");
  channel(a, sh, beta, "beta");
  channel(a, sh, running_mean, "running_mean");
  channel(a, sh, running_var, "running_var");
  if (a.device() == Device::cpu)
    return batchnorm2d_forward_infer_cpu(cache, sh, x, gamma, beta, running_mean, running_var, y);
#if defined(HT_HAVE_CUDA)
  return batchnorm2d_forward_infer_gpu(cache, sh, x, gamma, beta, running_mean, running_var, y);
#else
  no_cuda("batchnorm2d_forward_infer");
#endif
}

void batchnorm2d_backward(OpCachePtr& cache, const BatchNormShape& sh, const Tensor& x, const Tensor& dy,
                          const Tensor& gamma, const Tensor& save_mean, const Tensor& save_invstd, Tensor& dx,
                          Tensor& dgamma, Tensor& dbeta, bool accumulate) {
  const OpArgs a = bn_args("batchnorm2d_backward", sh, x);
  a.act(dy, "dy", {sh.n, sh.c, sh.h, sh.w}).act(dx, "dx", {sh.n, sh.c, sh.h, sh.w});
  a.same_dtype(x, "x", dy, "dy").same_dtype(x, "x", dx, "dx");
  channel(a, sh, gamma, "gamma");
  channel(a, sh, save_mean, "save_mean");
  channel(a, sh, save_invstd, "save_invstd");
  channel(a, sh, dgamma, "dgamma");
  channel(a, sh, dbeta, "dbeta");
  if (a.device() == Device::cpu)
    return batchnorm2d_backward_cpu(cache, sh, x, dy, gamma, save_mean, save_invstd, dx, dgamma, dbeta, accumulate);
#if defined(HT_HAVE_CUDA)
  return batchnorm2d_backward_gpu(cache, sh, x, dy, gamma, save_mean, save_invstd, dx, dgamma, dbeta, accumulate);
#else
  no_cuda("batchnorm2d_backward");
#endif
}

}  // namespace ht
