// batchnorm2d: the dispatcher (arguments checked once, then this file's CPU half or the GPU half in
// src/ops/batchnorm2d_gpu.cu, CUDA builds only) and the CPU half.
#include "src/ops/batchnorm2d.hpp"

#include <cmath>
#include <initializer_list>
#include <utility>
#include <string>
#include <vector>

#include "src/ops/dnnl_util.hpp"

namespace ht {

namespace {
/// x [N,C,H,W] and the shape; per-channel tensors are checked with channels().
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

/// Per-channel tensors (name, tensor): float32, C elements each (any shape, e.g. [C] views into a
/// flat buffer).
void channels(const OpArgs& a, const BatchNormShape& sh,
              std::initializer_list<std::pair<const char*, const Tensor*>> tensors) {
  for (const auto& [name, t] : tensors)
    a.f32(*t, name).require(t->numel() == sh.c, [&] {
      return std::string(std::string(name) + " " + t->shape_str() + " must have C = " + std::to_string(sh.c) +
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
  channels(a, sh, {{"gamma", &gamma}, {"beta", &beta}, {"running_mean", &running_mean}, {"running_var", &running_var},
                   {"save_mean", &save_mean}, {"save_invstd", &save_invstd}});
  if (a.device() == Device::cpu)
    return batchnorm2d_forward_train_cpu(cache, sh, x, gamma, beta, y, running_mean, running_var, save_mean,
                                         save_invstd);
  if constexpr (kHaveCuda)
    return batchnorm2d_forward_train_gpu(cache, sh, x, gamma, beta, y, running_mean, running_var, save_mean,
                                         save_invstd);
  no_cuda("batchnorm2d_forward_train");
}

void batchnorm2d_forward_infer(OpCachePtr& cache, const BatchNormShape& sh, const Tensor& x, const Tensor& gamma,
                               const Tensor& beta, const Tensor& running_mean, const Tensor& running_var, Tensor& y) {
  const OpArgs a = bn_args("batchnorm2d_forward_infer", sh, x);
  a.act(y, "y", {sh.n, sh.c, sh.h, sh.w}).same_dtype(x, "x", y, "y");
  channels(a, sh, {{"gamma", &gamma}, {"beta", &beta}, {"running_mean", &running_mean}, {"running_var", &running_var}});
  if (a.device() == Device::cpu)
    return batchnorm2d_forward_infer_cpu(cache, sh, x, gamma, beta, running_mean, running_var, y);
  if constexpr (kHaveCuda)
    return batchnorm2d_forward_infer_gpu(cache, sh, x, gamma, beta, running_mean, running_var, y);
  no_cuda("batchnorm2d_forward_infer");
}

void batchnorm2d_backward(OpCachePtr& cache, const BatchNormShape& sh, const Tensor& x, const Tensor& dy,
                          const Tensor& gamma, const Tensor& save_mean, const Tensor& save_invstd, Tensor& dx,
                          Tensor& dgamma, Tensor& dbeta, bool accumulate) {
  const OpArgs a = bn_args("batchnorm2d_backward", sh, x);
  a.act(dy, "dy", {sh.n, sh.c, sh.h, sh.w}).act(dx, "dx", {sh.n, sh.c, sh.h, sh.w});
  a.same_dtype(x, "x", dy, "dy").same_dtype(x, "x", dx, "dx");
  channels(a, sh, {{"gamma", &gamma}, {"save_mean", &save_mean}, {"save_invstd", &save_invstd}, {"dgamma", &dgamma},
                   {"dbeta", &dbeta}});
  if (a.device() == Device::cpu)
    return batchnorm2d_backward_cpu(cache, sh, x, dy, gamma, save_mean, save_invstd, dx, dgamma, dbeta, accumulate);
  if constexpr (kHaveCuda)
    return batchnorm2d_backward_gpu(cache, sh, x, dy, gamma, save_mean, save_invstd, dx, dgamma, dbeta, accumulate);
  no_cuda("batchnorm2d_backward");
}

}  // namespace ht

// ---- The CPU half ----
// CPU batch normalization on oneDNN 2.6 (batch_normalization_forward/backward, plain NCHW f32 or
// NHWC bf16 activations with float32 statistics, scale, shift and their gradients,
// flags use_scale | use_shift so gamma and beta are passed as separate [C] tensors without packing).
// Primitives are built once per shape in the caller's OpCache, one set per mode (train, inference,
// backward) so alternating training and evaluation does not rebuild them. The running statistics
// are updated here, not by oneDNN, to follow PyTorch exactly (momentum, unbiased variance).
namespace ht {
namespace {

namespace du = ht::dnnl_util;

// The CPU half's per-channel statistics (the GPU half leaves them to cuDNN).
/// 1/sqrt(var + eps) from the biased batch variance (what save_invstd holds).
float bn_invstd(double var, float eps) { return static_cast<float>(1.0 / std::sqrt(var + static_cast<double>(eps))); }
/// PyTorch running-mean update: (1-momentum)*running + momentum*batch_mean.
float bn_running_mean(float running, double batch_mean, float momentum) {
  return static_cast<float>((1.0 - momentum) * running + static_cast<double>(momentum) * batch_mean);
}
/// PyTorch running-variance update with the unbiased batch variance: m = N*H*W values per channel
/// (m > 1), var the biased batch variance.
float bn_running_var(float running, double var, float momentum, int64_t m) {
  return static_cast<float>((1.0 - momentum) * running +
                            static_cast<double>(momentum) * var * static_cast<double>(m) / static_cast<double>(m - 1));
}

using nf = dnnl::normalization_flags;

bool same_bn(const BatchNormShape& a, const BatchNormShape& b) {
  return a.n == b.n && a.c == b.c && a.h == b.h && a.w == b.w && a.eps == b.eps;
}

struct BatchNormCache : OpCache {
  dnnl::memory::desc x_md, c_md;  // [N,C,H,W] (nchw f32 or nhwc bf16), [C] f32
  DType t = DType::f32;            // the activations' dtype the primitives were built for
  bool train_built = false, infer_built = false, bwd_built = false;
  BatchNormShape train_key, infer_key, bwd_key;
  dnnl::batch_normalization_forward::primitive_desc train_pd, infer_pd;
  dnnl::batch_normalization_forward train, infer;
  dnnl::batch_normalization_backward::primitive_desc bwd_pd;
  dnnl::batch_normalization_backward bwd;
  std::vector<float> var;             // forward: batch variance (biased); backward: rebuilt from invstd
  std::vector<float> dgamma, dbeta;   // backward with accumulate: results before adding
  std::vector<float> zero_shift;      // backward: oneDNN 2.6 asks for SHIFT with use_shift (unused)
};

BatchNormCache& bn_cache(OpCachePtr& slot, const BatchNormShape& sh, DType t) {
  auto& c = cache_as<BatchNormCache>(slot);
  if (c.t != t) c.train_built = c.infer_built = c.bwd_built = false;
  c.t = t;
  c.x_md = du::act_desc({sh.n, sh.c, sh.h, sh.w}, t);
  c.c_md = du::f32_desc({sh.c}, du::tag::a);
  return c;
}

dnnl::batch_normalization_forward::primitive_desc make_fwd_pd(const BatchNormCache& c, const BatchNormShape& sh,
                                                              dnnl::prop_kind pk, nf flags) {
  dnnl::batch_normalization_forward::desc d(pk, c.x_md, sh.eps, flags);
  return dnnl::batch_normalization_forward::primitive_desc(d, du::scratchpad_attr(), du::engine());
}

}  // namespace

// The CPU half: the functions declared in src/ops/batchnorm2d.hpp.
void batchnorm2d_forward_train_cpu(OpCachePtr& cache, const BatchNormShape& sh, const Tensor& x, const Tensor& gamma,
                               const Tensor& beta, Tensor& y, Tensor& running_mean, Tensor& running_var,
                               Tensor& save_mean, Tensor& save_invstd) {
  const int64_t m = static_cast<int64_t>(sh.n) * sh.h * sh.w;

  auto& c = bn_cache(cache, sh, x.dtype());
  if (!c.train_built || !same_bn(c.train_key, sh)) {
    c.train_pd = make_fwd_pd(c, sh, dnnl::prop_kind::forward_training, nf::use_scale | nf::use_shift);
    c.train = dnnl::batch_normalization_forward(c.train_pd);
    c.train_key = sh;
    c.train_built = true;
  }
  c.var.resize(static_cast<size_t>(sh.c));
  du::execute(c.train, {{DNNL_ARG_SRC, du::wrap(c.x_md, x)},
                        {DNNL_ARG_DST, du::wrap(c.x_md, y)},
                        {DNNL_ARG_SCALE, du::wrap(c.c_md, gamma)},
                        {DNNL_ARG_SHIFT, du::wrap(c.c_md, beta)},
                        {DNNL_ARG_MEAN, du::wrap(c.c_md, save_mean)},
                        {DNNL_ARG_VARIANCE, du::wrap(c.c_md, c.var.data())},
                        {DNNL_ARG_SCRATCHPAD, du::scratchpad(c.train_pd.scratchpad_desc())}});

  // PyTorch: running = (1-momentum)*running + momentum*batch, with the unbiased batch variance.
  const float* mean = save_mean.data<float>();
  float* invstd = save_invstd.data<float>();
  float* rm = running_mean.data<float>();
  float* rv = running_var.data<float>();
  for (int ch = 0; ch < sh.c; ++ch) {
    const double v = c.var[static_cast<size_t>(ch)];
    invstd[ch] = bn_invstd(v, sh.eps);
    rm[ch] = bn_running_mean(rm[ch], mean[ch], sh.momentum);
    rv[ch] = bn_running_var(rv[ch], v, sh.momentum, m);
  }
}

void batchnorm2d_forward_infer_cpu(OpCachePtr& cache, const BatchNormShape& sh, const Tensor& x, const Tensor& gamma,
                               const Tensor& beta, const Tensor& running_mean, const Tensor& running_var, Tensor& y) {

  auto& c = bn_cache(cache, sh, x.dtype());
  if (!c.infer_built || !same_bn(c.infer_key, sh)) {
    c.infer_pd = make_fwd_pd(c, sh, dnnl::prop_kind::forward_inference,
                             nf::use_global_stats | nf::use_scale | nf::use_shift);
    c.infer = dnnl::batch_normalization_forward(c.infer_pd);
    c.infer_key = sh;
    c.infer_built = true;
  }
  du::execute(c.infer, {{DNNL_ARG_SRC, du::wrap(c.x_md, x)},
                        {DNNL_ARG_DST, du::wrap(c.x_md, y)},
                        {DNNL_ARG_SCALE, du::wrap(c.c_md, gamma)},
                        {DNNL_ARG_SHIFT, du::wrap(c.c_md, beta)},
                        {DNNL_ARG_MEAN, du::wrap(c.c_md, running_mean)},
                        {DNNL_ARG_VARIANCE, du::wrap(c.c_md, running_var)},
                        {DNNL_ARG_SCRATCHPAD, du::scratchpad(c.infer_pd.scratchpad_desc())}});
}

void batchnorm2d_backward_cpu(OpCachePtr& cache, const BatchNormShape& sh, const Tensor& x, const Tensor& dy,
                          const Tensor& gamma, const Tensor& save_mean, const Tensor& save_invstd, Tensor& dx,
                          Tensor& dgamma, Tensor& dbeta, bool accumulate) {

  auto& c = bn_cache(cache, sh, x.dtype());
  if (!c.bwd_built || !same_bn(c.bwd_key, sh)) {
    const auto flags = nf::use_scale | nf::use_shift;
    const auto hint = make_fwd_pd(c, sh, dnnl::prop_kind::forward_training, flags);
    dnnl::batch_normalization_backward::desc d(dnnl::prop_kind::backward, c.x_md, c.x_md, sh.eps, flags);
    c.bwd_pd = dnnl::batch_normalization_backward::primitive_desc(d, du::scratchpad_attr(), du::engine(), hint);
    c.bwd = dnnl::batch_normalization_backward(c.bwd_pd);
    c.bwd_key = sh;
    c.bwd_built = true;
  }
  // oneDNN takes the variance; the interface keeps 1/sqrt(var+eps), so invert it (in double: the
  // primitive then recomputes invstd to within an ulp or two).
  const size_t nc = static_cast<size_t>(sh.c);
  c.var.resize(nc);
  const float* invstd = save_invstd.data<float>();
  for (size_t ch = 0; ch < nc; ++ch) {
    const double is = invstd[ch];
    c.var[ch] = static_cast<float>(1.0 / (is * is) - static_cast<double>(sh.eps));
  }
  // oneDNN 2.6 requires a SHIFT argument in backward when use_shift is set, although the gradients
  // do not depend on it; beta is not part of this interface, so pass zeros.
  c.zero_shift.assign(nc, 0.f);
  float* dg = dgamma.data<float>();
  float* db = dbeta.data<float>();
  if (accumulate) {
    c.dgamma.resize(nc);
    c.dbeta.resize(nc);
    dg = c.dgamma.data();
    db = c.dbeta.data();
  }
  du::execute(c.bwd, {{DNNL_ARG_SRC, du::wrap(c.x_md, x)},
                      {DNNL_ARG_DIFF_DST, du::wrap(c.x_md, dy)},
                      {DNNL_ARG_SCALE, du::wrap(c.c_md, gamma)},
                      {DNNL_ARG_SHIFT, du::wrap(c.c_md, c.zero_shift.data())},
                      {DNNL_ARG_MEAN, du::wrap(c.c_md, save_mean)},
                      {DNNL_ARG_VARIANCE, du::wrap(c.c_md, c.var.data())},
                      {DNNL_ARG_DIFF_SRC, du::wrap(c.x_md, dx)},
                      {DNNL_ARG_DIFF_SCALE, du::wrap(c.c_md, dg)},
                      {DNNL_ARG_DIFF_SHIFT, du::wrap(c.c_md, db)},
                      {DNNL_ARG_SCRATCHPAD, du::scratchpad(c.bwd_pd.scratchpad_desc())}});
  if (accumulate) {
    du::add_into(dgamma.data<float>(), c.dgamma.data(), nc);
    du::add_into(dbeta.data<float>(), c.dbeta.data(), nc);
  }
}

}  // namespace ht
