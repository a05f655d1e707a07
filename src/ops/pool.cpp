#include "src/ops/pool.hpp"

namespace ht {

namespace {
OpArgs maxpool_args(const char* op, const PoolShape& sh, const Tensor& x) {
  OpArgs a(op, x);
  a.require(sh.n > 0 && sh.c > 0 && sh.h > 0 && sh.w > 0, [&] { return std::string("empty input"); });
  a.require(sh.kernel > 0 && sh.stride > 0 && sh.pad >= 0 && 2 * sh.pad <= sh.kernel, [&] {
    return std::string("kernel " + std::to_string(sh.kernel) + ", stride " + std::to_string(sh.stride) + ", pad " +
                       std::to_string(sh.pad) + " (need pad <= kernel/2)");
  });
  a.require(sh.p() > 0 && sh.q() > 0, [&] {
    return std::string("kernel " + std::to_string(sh.kernel) + " does not fit input " + std::to_string(sh.h) + "x" +
                       std::to_string(sh.w));
  });
  a.act(x, "x", {sh.n, sh.c, sh.h, sh.w});
  return a;
}

/// Global average pool: `nchw` must be [N,C,H,W] with H*W > 0 and `nc` hold N*C elements.
OpArgs avgpool_args(const char* op, const Tensor& nchw, const char* n4, const Tensor& nc, const char* n2) {
  OpArgs a(op, nchw);
  a.act(nchw, n4).act(nc, n2).same_dtype(nchw, n4, nc, n2);
  a.require(nchw.ndim() == 4,
            [&] { return std::string(std::string(n4) + " must be [N,C,H,W], got " + nchw.shape_str()); });
  a.require(nchw.dim(2) * nchw.dim(3) > 0, [&] { return std::string("empty spatial extent " + nchw.shape_str()); });
  a.require(nc.numel() == nchw.dim(0) * nchw.dim(1), [&] {
    return std::string(std::string(n2) + " " + nc.shape_str() +
                       " must hold N*C = " + std::to_string(nchw.dim(0) * nchw.dim(1)));
  });
  return a;
}
}  // namespace

void maxpool2d_forward(OpCachePtr& cache, const PoolShape& sh, const Tensor& x, Tensor& y) {
  const OpArgs a = maxpool_args("maxpool2d_forward", sh, x);
  a.act(y, "y", {sh.n, sh.c, sh.p(), sh.q()}).same_dtype(x, "x", y, "y");
  if (a.device() == Device::cpu) return maxpool2d_forward_cpu(cache, sh, x, y);
#if defined(HT_HAVE_CUDA)
  return maxpool2d_forward_gpu(cache, sh, x, y);
#else
  no_cuda("maxpool2d_forward");
#endif
}

void maxpool2d_backward(OpCachePtr& cache, const PoolShape& sh, const Tensor& x, const Tensor& y, const Tensor& dy,
                        Tensor& dx) {
  const OpArgs a = maxpool_args("maxpool2d_backward", sh, x);
  a.act(y, "y", {sh.n, sh.c, sh.p(), sh.q()}).act(dy, "dy", {sh.n, sh.c, sh.p(), sh.q()});
  a.act(dx, "dx", {sh.n, sh.c, sh.h, sh.w});
  a.same_dtype(x, "x", y, "y").same_dtype(x, "x", dy, "dy").same_dtype(x, "x", dx, "dx");
  if (a.device() == Device::cpu) return maxpool2d_backward_cpu(cache, sh, x, y, dy, dx);
#if defined(HT_HAVE_CUDA)
  return maxpool2d_backward_gpu(cache, sh, x, y, dy, dx);
#else
  no_cuda("maxpool2d_backward");
#endif
}

void global_avgpool_forward(OpCachePtr& cache, const Tensor& x, Tensor& y) {
  const OpArgs a = avgpool_args("global_avgpool_forward", x, "x", y, "y");
  if (a.device() == Device::cpu) return global_avgpool_forward_cpu(cache, x, y);
#if defined(HT_HAVE_CUDA)
  return global_avgpool_forward_gpu(cache, x, y);
#else
  no_cuda("global_avgpool_forward");
#endif
}

void global_avgpool_backward(OpCachePtr& cache, const Tensor& dy, Tensor& dx) {
  const OpArgs a = avgpool_args("global_avgpool_backward", dx, "dx", dy, "dy");
  if (a.device() == Device::cpu) return global_avgpool_backward_cpu(cache, dy, dx);
#if defined(HT_HAVE_CUDA)
  return global_avgpool_backward_gpu(cache, dy, dx);
#else
  no_cuda("global_avgpool_backward");
#endif
}

}  // namespace ht
