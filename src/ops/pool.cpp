// pool: the dispatcher (arguments checked once, then this file's CPU half or the GPU half in
// src/ops/pool_gpu.cu, CUDA builds only) and the CPU half.
#include "src/ops/pool.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "base/bf16.hpp"
#include "src/ops/dnnl_util.hpp"

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
  if constexpr (kHaveCuda) return maxpool2d_forward_gpu(cache, sh, x, y);
  no_cuda("maxpool2d_forward");
}

void maxpool2d_backward(OpCachePtr& cache, const PoolShape& sh, const Tensor& x, const Tensor& y, const Tensor& dy,
                        Tensor& dx) {
  const OpArgs a = maxpool_args("maxpool2d_backward", sh, x);
  a.act(y, "y", {sh.n, sh.c, sh.p(), sh.q()}).act(dy, "dy", {sh.n, sh.c, sh.p(), sh.q()});
  a.act(dx, "dx", {sh.n, sh.c, sh.h, sh.w});
  a.same_dtype(x, "x", y, "y").same_dtype(x, "x", dy, "dy").same_dtype(x, "x", dx, "dx");
  if (a.device() == Device::cpu) return maxpool2d_backward_cpu(cache, sh, x, y, dy, dx);
  if constexpr (kHaveCuda) return maxpool2d_backward_gpu(cache, sh, x, y, dy, dx);
  no_cuda("maxpool2d_backward");
}

void global_avgpool_forward(OpCachePtr& cache, const Tensor& x, Tensor& y) {
  const OpArgs a = avgpool_args("global_avgpool_forward", x, "x", y, "y");
  if (a.device() == Device::cpu) return global_avgpool_forward_cpu(cache, x, y);
  if constexpr (kHaveCuda) return global_avgpool_forward_gpu(cache, x, y);
  no_cuda("global_avgpool_forward");
}

void global_avgpool_backward(OpCachePtr& cache, const Tensor& dy, Tensor& dx) {
  const OpArgs a = avgpool_args("global_avgpool_backward", dx, "dx", dy, "dy");
  if (a.device() == Device::cpu) return global_avgpool_backward_cpu(cache, dy, dx);
  if constexpr (kHaveCuda) return global_avgpool_backward_gpu(cache, dy, dx);
  no_cuda("global_avgpool_backward");
}

}  // namespace ht

// ---- The CPU half ----
// CPU pooling. Max pool: oneDNN 2.6 pooling_forward (forward_training, so it emits the arg-max
// workspace) and pooling_backward, built once per shape in the caller's OpCache; tensors are plain
// NCHW and wrapped without copies. NaN propagates as in PyTorch (planes holding a NaN are redone by
// own code: fix_nan_forward/backward below; float32 only: in bf16/fp16 a NaN window gives oneDNN's
// result). Global average pool: own loops (one reduction per plane; NHWC rows in bf16/fp16, summed in
// float32). Low-precision tensors are NHWC (src/ops/op.hpp), given to oneDNN as they are.
namespace ht {
namespace {

namespace du = ht::dnnl_util;

bool same_pool(const PoolShape& a, const PoolShape& b) {
  return a.n == b.n && a.c == b.c && a.h == b.h && a.w == b.w && a.kernel == b.kernel && a.stride == b.stride &&
         a.pad == b.pad;
}

/// Primitives and the arg-max workspace of one max-pool layer. The workspace written by forward is
/// consumed by backward; ws_src records which input it belongs to.
struct MaxPoolCache : OpCache {
  bool built = false;
  PoolShape key;
  DType t = DType::f32;
  dnnl::memory::desc x_md, y_md;
  dnnl::pooling_forward::primitive_desc fwd_pd;
  dnnl::pooling_forward fwd;
  dnnl::pooling_backward::primitive_desc bwd_pd;
  dnnl::pooling_backward bwd;
  dnnl::memory ws;
  const void* ws_src = nullptr;  // x.raw() of the forward that filled ws; null when ws is stale
  Tensor y_scratch;              // output of the recomputed forward when backward finds ws stale
};

MaxPoolCache& maxpool_cache(OpCachePtr& slot, const PoolShape& sh, DType t) {
  auto& c = cache_as<MaxPoolCache>(slot);
  if (c.built && same_pool(c.key, sh) && c.t == t) return c;
  c = MaxPoolCache{};
  const dnnl::memory::dims x_dims{sh.n, sh.c, sh.h, sh.w}, y_dims{sh.n, sh.c, sh.p(), sh.q()};
  c.x_md = du::act_desc(x_dims, t);
  c.y_md = du::act_desc(y_dims, t);
  c.t = t;
  const dnnl::memory::dims strides{sh.stride, sh.stride}, kernel{sh.kernel, sh.kernel};
  // oneDNN checks (H - K + pad_l + pad_r)/S + 1 == P with floor division, PyTorch's formula, so the
  // right padding equals the left one; windows never read the padding as a value (it is -inf).
  const dnnl::memory::dims pad_l{sh.pad, sh.pad}, pad_r{sh.pad, sh.pad};
  const auto attr = du::scratchpad_attr();
  dnnl::pooling_forward::desc fd(dnnl::prop_kind::forward_training, dnnl::algorithm::pooling_max, c.x_md, c.y_md,
                                 strides, kernel, pad_l, pad_r);
  c.fwd_pd = dnnl::pooling_forward::primitive_desc(fd, attr, du::engine());
  c.fwd = dnnl::pooling_forward(c.fwd_pd);
  dnnl::pooling_backward::desc bd(dnnl::algorithm::pooling_max, c.x_md, c.y_md, strides, kernel, pad_l, pad_r);
  c.bwd_pd = dnnl::pooling_backward::primitive_desc(bd, attr, du::engine(), c.fwd_pd);
  c.bwd = dnnl::pooling_backward(c.bwd_pd);
  c.ws = dnnl::memory(c.fwd_pd.workspace_desc(), du::engine());
  c.key = sh;
  c.built = true;
  return c;
}

void run_forward(MaxPoolCache& c, const Tensor& x, Tensor& y) {
  du::execute(c.fwd, {{DNNL_ARG_SRC, du::wrap(c.x_md, x)},
                      {DNNL_ARG_DST, du::wrap(c.y_md, y)},
                      {DNNL_ARG_WORKSPACE, c.ws},
                      {DNNL_ARG_SCRATCHPAD, du::scratchpad(c.fwd_pd.scratchpad_desc())}});
  c.ws_src = x.raw();
}

// ---- NaN, as PyTorch: a window holding a NaN gives NaN and routes its gradient to its last NaN ----
// (PyTorch's max pool takes a value when `v > max || isnan(v)`.) oneDNN's max does not propagate
// NaN, so planes holding one are redone here; planes without NaN keep oneDNN's result.

/// True when the plane holds a NaN (x != x: one vectorisable pass).
bool plane_has_nan(const float* p, int64_t n) {
  int64_t nans = 0;  // a counting reduction vectorises; a short-circuit || does not
#pragma omp simd reduction(+ : nans)
  for (int64_t i = 0; i < n; ++i) nans += (p[i] != p[i]) ? 1 : 0;
  return nans > 0;
}

/// Index in the plane of the PyTorch arg-max of output (p, q): the first maximum, or the last NaN.
int64_t torch_argmax(const float* plane, const PoolShape& sh, int p, int q) {
  int64_t arg = -1;
  float best = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < sh.kernel; ++i)
    for (int j = 0; j < sh.kernel; ++j) {
      const int hi = p * sh.stride - sh.pad + i, wj = q * sh.stride - sh.pad + j;
      if (hi < 0 || hi >= sh.h || wj < 0 || wj >= sh.w) continue;
      const int64_t idx = static_cast<int64_t>(hi) * sh.w + wj;
      const float v = plane[idx];
      if (arg < 0 || v > best || std::isnan(v)) {
        best = v;
        arg = idx;
      }
    }
  return arg;
}

/// Forward of the planes holding a NaN (y already has oneDNN's result for the others).
void fix_nan_forward(const PoolShape& sh, const float* x, float* y) {
  const int64_t hw = int64_t{sh.h} * sh.w, pq = int64_t{sh.p()} * sh.q();
  if (!plane_has_nan(x, int64_t{sh.n} * sh.c * hw)) return;  // the common case: one vectorised pass
  for (int64_t nc = 0; nc < int64_t{sh.n} * sh.c; ++nc) {
    const float* plane = x + nc * hw;
    if (!plane_has_nan(plane, hw)) continue;
    for (int p = 0; p < sh.p(); ++p)
      for (int q = 0; q < sh.q(); ++q) y[nc * pq + int64_t{p} * sh.q() + q] = plane[torch_argmax(plane, sh, p, q)];
  }
}

/// Backward of the planes holding a NaN: dx overwritten there, dy added in output order as PyTorch.
void fix_nan_backward(const PoolShape& sh, const float* x, const float* dy, float* dx) {
  const int64_t hw = int64_t{sh.h} * sh.w, pq = int64_t{sh.p()} * sh.q();
  if (!plane_has_nan(x, int64_t{sh.n} * sh.c * hw)) return;  // the common case: one vectorised pass
  for (int64_t nc = 0; nc < int64_t{sh.n} * sh.c; ++nc) {
    const float* plane = x + nc * hw;
    if (!plane_has_nan(plane, hw)) continue;
    float* g = dx + nc * hw;
    std::fill(g, g + hw, 0.f);
    for (int p = 0; p < sh.p(); ++p)
      for (int q = 0; q < sh.q(); ++q) g[torch_argmax(plane, sh, p, q)] += dy[nc * pq + int64_t{p} * sh.q() + q];
  }
}

// ---- global average pool (own code) -----------------------------------------------------------

/// Runs body(i, hw, inv) for each plane i of the N*C planes of hw = H*W elements of the NCHW tensor t
/// (inv = 1/hw), across OpenMP threads when t is large enough to pay for the fork.
template <class Body>
void for_each_plane(const Tensor& t, Body body) {
  const int64_t nc = t.dim(0) * t.dim(1), hw = t.dim(2) * t.dim(3);
  const float inv = 1.0f / static_cast<float>(hw);
#pragma omp parallel for if (nc * hw >= (1 << 15)) schedule(static)
  for (int64_t i = 0; i < nc; ++i) body(i, hw, inv);
}

/// Element access of the low-precision dtypes (float math).
inline float ld16(const uint16_t* p, int64_t i, bool bf) { return bf ? f32_from_bf16_bits(p[i]) : f32_from_f16_bits(p[i]); }
inline uint16_t st16(float v, bool bf) { return bf ? bf16_bits_from_f32(v) : f16_bits_from_f32(v); }

/// Global average pool of an NHWC bf16/fp16 tensor: y[n,c] = mean over the H*W rows (float sums).
/// A pass of the global average pool over an NHWC bf16/fp16 tensor `image` [N,C,H,W] (HW rows of
/// C values per image): the sizes, the dtype, the mean's factor 1 / HW, and the pass's 16-bit input
/// and output (forward: x -> y; backward: dy -> dx, `image` being dx).
struct NhwcPool {
  int64_t N, C, HW;
  bool bf;
  float inv;
  const uint16_t* in;
  uint16_t* out;
  NhwcPool(const Tensor& image, const Tensor& in_t, Tensor& out_t)
      : N(image.dim(0)), C(image.dim(1)), HW(image.dim(2) * image.dim(3)), bf(image.dtype() == DType::bf16),
        inv(1.0f / static_cast<float>(HW)), in(static_cast<const uint16_t*>(in_t.raw())),
        out(static_cast<uint16_t*>(out_t.raw())) {}
};

void avgpool_nhwc_forward(const Tensor& x, Tensor& y) {
  const auto [N, C, HW, bf, inv, xp, yp] = NhwcPool(x, x, y);
#pragma omp parallel for if (N * C * HW >= (1 << 15)) schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    std::vector<float> s(static_cast<size_t>(C), 0.f);
    for (int64_t r = 0; r < HW; ++r) {
      const uint16_t* row = xp + (n * HW + r) * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) s[static_cast<size_t>(c)] += ld16(row, c, bf);
    }
    for (int64_t c = 0; c < C; ++c) yp[n * C + c] = st16(s[static_cast<size_t>(c)] * inv, bf);
  }
}

void avgpool_nhwc_backward(const Tensor& dy, Tensor& dx) {
  const auto [N, C, HW, bf, inv, dyp, dxp] = NhwcPool(dx, dy, dx);
#pragma omp parallel for if (N * C * HW >= (1 << 15)) schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    std::vector<uint16_t> g(static_cast<size_t>(C));
    for (int64_t c = 0; c < C; ++c) g[static_cast<size_t>(c)] = st16(ld16(dyp, n * C + c, bf) * inv, bf);
    for (int64_t r = 0; r < HW; ++r) std::copy(g.begin(), g.end(), dxp + (n * HW + r) * C);
  }
}

}  // namespace

// The CPU half: the functions declared in src/ops/pool.hpp.
void maxpool2d_forward_cpu(OpCachePtr& cache, const PoolShape& sh, const Tensor& x, Tensor& y) {
  auto& c = maxpool_cache(cache, sh, x.dtype());
  run_forward(c, x, y);
  if (x.dtype() == DType::f32) fix_nan_forward(sh, x.data<float>(), y.data<float>());
}

void maxpool2d_backward_cpu(OpCachePtr& cache, const PoolShape& sh, const Tensor& x, const Tensor& y, const Tensor& dy,
                        Tensor& dx) {
  auto& c = maxpool_cache(cache, sh, x.dtype());
  if (c.ws_src != x.raw()) {
    // The workspace is not from this input (new shape, or no forward through this cache): redo the
    // forward to regenerate the arg-max indices rather than route gradients wrongly.
    c.y_scratch.ensure({sh.n, sh.c, sh.p(), sh.q()}, x.dtype(), Device::cpu);
    run_forward(c, x, c.y_scratch);
  }
  du::execute(c.bwd, {{DNNL_ARG_DIFF_DST, du::wrap(c.y_md, dy)},
                      {DNNL_ARG_DIFF_SRC, du::wrap(c.x_md, dx)},
                      {DNNL_ARG_WORKSPACE, c.ws},
                      {DNNL_ARG_SCRATCHPAD, du::scratchpad(c.bwd_pd.scratchpad_desc())}});
  if (x.dtype() == DType::f32) fix_nan_backward(sh, x.data<float>(), dy.data<float>(), dx.data<float>());
}

void global_avgpool_forward_cpu(OpCachePtr& /*cache*/, const Tensor& x, Tensor& y) {
  if (x.dtype() != DType::f32) return avgpool_nhwc_forward(x, y);
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  for_each_plane(x, [=](int64_t i, int64_t hw, float inv) {
    const float* plane = xp + i * hw;
    float s = 0.f;
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < hw; ++j) s += plane[j];
    yp[i] = s * inv;
  });
}

void global_avgpool_backward_cpu(OpCachePtr& /*cache*/, const Tensor& dy, Tensor& dx) {
  if (dx.dtype() != DType::f32) return avgpool_nhwc_backward(dy, dx);
  const float* dyp = dy.data<float>();
  float* dxp = dx.data<float>();
  for_each_plane(dx, [=](int64_t i, int64_t hw, float inv) {
    const float g = dyp[i] * inv;
    float* plane = dxp + i * hw;
#pragma omp simd
    for (int64_t j = 0; j < hw; ++j) plane[j] = g;
  });
}

}  // namespace ht
