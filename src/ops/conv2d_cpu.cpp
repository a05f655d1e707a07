// CPU conv2d with oneDNN 2.6 convolution primitives (forward, backward data, backward weights +
// bias). User tensors are plain NCHW / KCRS f32; the primitives may pick blocked internal layouts
// (format_tag::any, e.g. nChw16c / OIhw16i16o on AVX-512), in which case cached reorders convert
// at the boundary (dnnl_util::Staged). Primitives and reorders are built once per shape and kept
// in the caller's OpCache; a shape (or bias presence) change rebuilds them. Reordered copies live
// only within a call, in the thread's workspace slots (memory = max over layers, not the sum).
#include <cstdlib>
#include <cstring>
#include <optional>

#include "src/ops/conv2d.hpp"
#include "src/ops/dnnl_util.hpp"

namespace ht::cpu {
namespace {

namespace du = ht::dnnl_util;
using dnnl::memory;

/// How a shape is computed. Chosen from 1-thread measurements on ResNet-18/CIFAR and fmnist_cnn
/// shapes (results/cpu/conv2d_linear_ops.md):
///  - 1x1 filters: plain NCHW/OIHW, no reorders (oneDNN's GEMM-based kernel beats blocked layouts
///    plus the reorders they need);
///  - 3x3 stride 1 with >= 32 input and output channels: Winograd F(4x4,3x3) in blocked layouts,
///    1.6-2x faster than direct on ResNet layers, 1.1x on fmnist's 32->64 (relative error up to
///    ~5e-6 of max|y| instead of ~3e-7); the 3->64 stem was 3x slower with it;
///  - everything else: direct convolution, oneDNN's choice of layout (nChw16c) with reorders.
/// HT_CONV_LAYOUT=any|plain and HT_CONV_ALGO=direct|winograd|auto override it (benchmarking, or
/// direct-only runs for the tightest agreement with other frameworks).
struct Plan {
  bool any_layout = true;
  dnnl::algorithm algo = dnnl::algorithm::convolution_direct;
};

Plan plan_for(const Conv2dShape& sh) {
  Plan p;
  p.any_layout = !(sh.r == 1 && sh.s == 1);
  if (sh.r == 3 && sh.s == 3 && sh.stride == 1 && sh.c >= 32 && sh.k >= 32)
    p.algo = dnnl::algorithm::convolution_winograd;
  static const char* layout = std::getenv("HT_CONV_LAYOUT");
  static const char* algo = std::getenv("HT_CONV_ALGO");
  if (layout && std::strcmp(layout, "plain") == 0) p.any_layout = false;
  if (layout && std::strcmp(layout, "any") == 0) p.any_layout = true;
  if (algo && std::strcmp(algo, "direct") == 0) p.algo = dnnl::algorithm::convolution_direct;
  if (algo && std::strcmp(algo, "auto") == 0) p.algo = dnnl::algorithm::convolution_auto;
  if (algo && std::strcmp(algo, "winograd") == 0 && sh.r == 3 && sh.s == 3 && sh.stride == 1)
    p.algo = dnnl::algorithm::convolution_winograd;
  if (!p.any_layout && p.algo == dnnl::algorithm::convolution_winograd) p.algo = dnnl::algorithm::convolution_direct;
  return p;
}

/// Creates a primitive descriptor with algorithm `algo`, falling back to direct convolution when
/// oneDNN has no implementation for it (e.g. Winograd on a CPU without AVX-512).
template <class PD, class MakeDesc, class... Hint>
PD make_pd(dnnl::algorithm algo, const MakeDesc& make_desc, const Hint&... hint) {
  if (algo != dnnl::algorithm::convolution_direct) {
    try {
      return PD(make_desc(algo), du::scratchpad_attr(), du::engine(), hint...);
    } catch (const dnnl::error&) {
    }
  }
  return PD(make_desc(dnnl::algorithm::convolution_direct), du::scratchpad_attr(), du::engine(), hint...);
}

bool same_shape(const Conv2dShape& a, const Conv2dShape& b) {
  return a.n == b.n && a.c == b.c && a.h == b.h && a.w == b.w && a.k == b.k && a.r == b.r && a.s == b.s &&
         a.stride == b.stride && a.pad == b.pad;
}

struct Descs {
  memory::dims x, w, b, y, strides, pad;
  memory::desc x_any, w_any, b_plain, y_any;
  memory::desc x_user, w_user, y_user;
  explicit Descs(const Conv2dShape& sh) {
    x = {sh.n, sh.c, sh.h, sh.w};
    w = {sh.k, sh.c, sh.r, sh.s};
    b = {sh.k};
    y = {sh.n, sh.k, sh.p(), sh.q()};
    strides = {sh.stride, sh.stride};
    pad = {sh.pad, sh.pad};
    const bool any = plan_for(sh).any_layout;
    x_user = du::f32_desc(x, du::tag::nchw);
    w_user = du::f32_desc(w, du::tag::oihw);
    y_user = du::f32_desc(y, du::tag::nchw);
    x_any = any ? du::f32_desc(x, du::tag::any) : x_user;
    w_any = any ? du::f32_desc(w, du::tag::any) : w_user;
    y_any = any ? du::f32_desc(y, du::tag::any) : y_user;
    b_plain = du::f32_desc(b, du::tag::x);
  }
};

struct Conv2dCpuCache : OpCache {
  // Forward (also the hint for the backward primitives).
  std::optional<Conv2dShape> fwd_shape;
  bool fwd_bias = false;
  dnnl::convolution_forward::primitive_desc fwd_pd;
  dnnl::convolution_forward fwd;
  du::Staged fx, fw, fy;

  // Backward data.
  std::optional<Conv2dShape> bd_shape;
  dnnl::convolution_backward_data::primitive_desc bd_pd;
  dnnl::convolution_backward_data bd;
  du::Staged bd_dy, bd_w, bd_dx;

  // Backward weights (+ bias).
  std::optional<Conv2dShape> bw_shape;
  bool bw_bias = false;
  dnnl::convolution_backward_weights::primitive_desc bw_pd;
  dnnl::convolution_backward_weights bw;
  du::Staged bw_x, bw_dy, bw_dw, bw_db;

  void ensure_fwd(const Conv2dShape& sh, bool bias) {
    if (fwd_shape && same_shape(*fwd_shape, sh) && fwd_bias == bias) return;
    const Descs d(sh);
    fwd_pd = make_pd<dnnl::convolution_forward::primitive_desc>(plan_for(sh).algo, [&](dnnl::algorithm a) {
      const auto pk = dnnl::prop_kind::forward_training;
      return bias ? dnnl::convolution_forward::desc(pk, a, d.x_any, d.w_any, d.b_plain, d.y_any, d.strides, d.pad, d.pad)
                  : dnnl::convolution_forward::desc(pk, a, d.x_any, d.w_any, d.y_any, d.strides, d.pad, d.pad);
    });
    fwd = dnnl::convolution_forward(fwd_pd);
    fx.init(d.x_user, fwd_pd.src_desc(), 0);
    fw.init(d.w_user, fwd_pd.weights_desc(), 1);
    fy.init(d.y_user, fwd_pd.dst_desc(), 2);
    fwd_shape = sh;
    fwd_bias = bias;
    bd_shape.reset();  // the backward primitives were hinted by the old forward
    bw_shape.reset();
  }

  void ensure_bwd_data(const Conv2dShape& sh) {
    if (bd_shape && same_shape(*bd_shape, sh)) return;
    const Descs d(sh);
    bd_pd = make_pd<dnnl::convolution_backward_data::primitive_desc>(
        plan_for(sh).algo,
        [&](dnnl::algorithm a) {
          return dnnl::convolution_backward_data::desc(a, d.x_any, d.w_any, d.y_any, d.strides, d.pad, d.pad);
        },
        fwd_pd);
    bd = dnnl::convolution_backward_data(bd_pd);
    bd_dy.init(d.y_user, bd_pd.diff_dst_desc(), 4);
    bd_w.init(d.w_user, bd_pd.weights_desc(), 5);
    bd_dx.init(d.x_user, bd_pd.diff_src_desc(), 6);
    bd_shape = sh;
  }

  void ensure_bwd_weights(const Conv2dShape& sh, bool bias) {
    if (bw_shape && same_shape(*bw_shape, sh) && bw_bias == bias) return;
    const Descs d(sh);
    bw_pd = make_pd<dnnl::convolution_backward_weights::primitive_desc>(
        plan_for(sh).algo,
        [&](dnnl::algorithm a) {
          return bias ? dnnl::convolution_backward_weights::desc(a, d.x_any, d.w_any, d.b_plain, d.y_any, d.strides,
                                                                 d.pad, d.pad)
                      : dnnl::convolution_backward_weights::desc(a, d.x_any, d.w_any, d.y_any, d.strides, d.pad,
                                                                 d.pad);
        },
        fwd_pd);
    bw = dnnl::convolution_backward_weights(bw_pd);
    bw_x.init(d.x_user, bw_pd.src_desc(), 0);
    bw_dy.init(d.y_user, bw_pd.diff_dst_desc(), 1);
    bw_dw.init(d.w_user, bw_pd.diff_weights_desc(), 2);
    bw_db.init(d.b_plain, bias ? bw_pd.diff_bias_desc() : d.b_plain, 3);
    bw_shape = sh;
    bw_bias = bias;
  }
};

}  // namespace

void conv2d_forward(OpCachePtr& cache, const Conv2dShape& sh, const Tensor& x, const Tensor& w, const Tensor* b,
                    Tensor& y) {
  auto& c = cache_as<Conv2dCpuCache>(cache);
  c.ensure_fwd(sh, b != nullptr);

  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, c.fx.in(x.raw())},
      {DNNL_ARG_WEIGHTS, c.fw.in(w.raw())},
      {DNNL_ARG_DST, c.fy.out(y.raw(), false)},
      {DNNL_ARG_SCRATCHPAD, du::scratchpad(c.fwd_pd.scratchpad_desc())}};
  if (b) args.emplace(DNNL_ARG_BIAS, du::wrap(du::f32_desc({sh.k}, du::tag::x), *b));
  du::execute(c.fwd, args);
  c.fy.finish();
}

void conv2d_backward(OpCachePtr& cache, const Conv2dShape& sh, const Tensor& x, const Tensor& w, const Tensor& dy,
                     Tensor* dx, Tensor& dw, Tensor* db, bool accumulate) {
  auto& c = cache_as<Conv2dCpuCache>(cache);
  // The backward primitives need the forward primitive descriptor as a hint; keep the forward's
  // bias choice if it was built for this shape (bias does not change the chosen layouts).
  c.ensure_fwd(sh, c.fwd_shape && same_shape(*c.fwd_shape, sh) ? c.fwd_bias : false);
  c.ensure_bwd_weights(sh, db != nullptr);
  if (dx) c.ensure_bwd_data(sh);

  // Backward weights first: dy is reordered once when both primitives want the same layout.
  memory mdy = c.bw_dy.in(dy.raw());
  {
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC, c.bw_x.in(x.raw())},
        {DNNL_ARG_DIFF_DST, mdy},
        {DNNL_ARG_DIFF_WEIGHTS, c.bw_dw.out(dw.raw(), accumulate)},
        {DNNL_ARG_SCRATCHPAD, du::scratchpad(c.bw_pd.scratchpad_desc())}};
    if (db) args.emplace(DNNL_ARG_DIFF_BIAS, c.bw_db.out(db->raw(), accumulate));
    du::execute(c.bw, args);
    c.bw_dw.finish();
    if (db) c.bw_db.finish();
  }
  if (dx) {
    const bool share = c.bw_dy.want_desc() == c.bd_dy.want_desc();
    std::unordered_map<int, memory> args{
        {DNNL_ARG_DIFF_DST, share ? mdy : c.bd_dy.in(dy.raw())},
        {DNNL_ARG_WEIGHTS, c.bd_w.in(w.raw())},
        {DNNL_ARG_DIFF_SRC, c.bd_dx.out(dx->raw(), false)},
        {DNNL_ARG_SCRATCHPAD, du::scratchpad(c.bd_pd.scratchpad_desc())}};
    du::execute(c.bd, args);
    c.bd_dx.finish();
  }
}

}  // namespace ht::cpu
