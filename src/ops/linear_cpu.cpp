// CPU linear with oneDNN 2.6 inner product primitives (forward, backward data, backward weights +
// bias). x [N,in] and y [N,out] stay plain; the weights may be given a layout chosen by oneDNN
// (format_tag::any), reordered from/to the user's [out,in] by cached reorders (dnnl_util::Staged).
// Primitives are built once per shape and kept in the caller's OpCache; a shape change rebuilds.
#include <cstdlib>
#include <cstring>
#include <optional>

#include "src/ops/dnnl_util.hpp"
#include "src/ops/linear.hpp"

namespace ht::cpu {
namespace {

namespace du = ht::dnnl_util;
using dnnl::memory;

/// HT_LINEAR_LAYOUT=any|plain overrides the weight layout policy (for benchmarking).
bool use_any_weights() {
  static const char* env = std::getenv("HT_LINEAR_LAYOUT");
  if (env && std::strcmp(env, "plain") == 0) return false;
  if (env && std::strcmp(env, "any") == 0) return true;
  return false;
}

bool same_shape(const LinearShape& a, const LinearShape& b) { return a.n == b.n && a.in == b.in && a.out == b.out; }

struct Descs {
  memory::desc x, w_user, w_any, b, y;
  explicit Descs(const LinearShape& sh) {
    x = du::f32_desc({sh.n, sh.in}, du::tag::nc);
    y = du::f32_desc({sh.n, sh.out}, du::tag::nc);
    w_user = du::f32_desc({sh.out, sh.in}, du::tag::oi);
    w_any = use_any_weights() ? du::f32_desc({sh.out, sh.in}, du::tag::any) : w_user;
    b = du::f32_desc({sh.out}, du::tag::x);
  }
};

struct LinearCpuCache : OpCache {
  std::optional<LinearShape> fwd_shape;
  bool fwd_bias = false;
  dnnl::inner_product_forward::primitive_desc fwd_pd;
  dnnl::inner_product_forward fwd;
  du::Staged fx, fw, fy;

  std::optional<LinearShape> bd_shape;
  dnnl::inner_product_backward_data::primitive_desc bd_pd;
  dnnl::inner_product_backward_data bd;
  du::Staged bd_dy, bd_w, bd_dx;

  std::optional<LinearShape> bw_shape;
  bool bw_bias = false;
  dnnl::inner_product_backward_weights::primitive_desc bw_pd;
  dnnl::inner_product_backward_weights bw;
  du::Staged bw_x, bw_dy, bw_dw, bw_db;

  void ensure_fwd(const LinearShape& sh, bool bias) {
    if (fwd_shape && same_shape(*fwd_shape, sh) && fwd_bias == bias) return;
    const Descs d(sh);
    auto desc = bias ? dnnl::inner_product_forward::desc(dnnl::prop_kind::forward_training, d.x, d.w_any, d.b, d.y)
                     : dnnl::inner_product_forward::desc(dnnl::prop_kind::forward_training, d.x, d.w_any, d.y);
    fwd_pd = dnnl::inner_product_forward::primitive_desc(desc, du::scratchpad_attr(), du::engine());
    fwd = dnnl::inner_product_forward(fwd_pd);
    fx.init(d.x, fwd_pd.src_desc(), 0);
    fw.init(d.w_user, fwd_pd.weights_desc(), 1);
    fy.init(d.y, fwd_pd.dst_desc(), 2);
    fwd_shape = sh;
    fwd_bias = bias;
    bd_shape.reset();
    bw_shape.reset();
  }

  void ensure_bwd_data(const LinearShape& sh) {
    if (bd_shape && same_shape(*bd_shape, sh)) return;
    const Descs d(sh);
    dnnl::inner_product_backward_data::desc desc(d.x, d.w_any, d.y);
    bd_pd = dnnl::inner_product_backward_data::primitive_desc(desc, du::scratchpad_attr(), du::engine(), fwd_pd);
    bd = dnnl::inner_product_backward_data(bd_pd);
    bd_dy.init(d.y, bd_pd.diff_dst_desc(), 4);
    bd_w.init(d.w_user, bd_pd.weights_desc(), 5);
    bd_dx.init(d.x, bd_pd.diff_src_desc(), 6);
    bd_shape = sh;
  }

  void ensure_bwd_weights(const LinearShape& sh, bool bias) {
    if (bw_shape && same_shape(*bw_shape, sh) && bw_bias == bias) return;
    const Descs d(sh);
    auto desc = bias ? dnnl::inner_product_backward_weights::desc(d.x, d.w_any, d.b, d.y)
                     : dnnl::inner_product_backward_weights::desc(d.x, d.w_any, d.y);
    bw_pd = dnnl::inner_product_backward_weights::primitive_desc(desc, du::scratchpad_attr(), du::engine(), fwd_pd);
    bw = dnnl::inner_product_backward_weights(bw_pd);
    bw_x.init(d.x, bw_pd.src_desc(), 0);
    bw_dy.init(d.y, bw_pd.diff_dst_desc(), 1);
    bw_dw.init(d.w_user, bw_pd.diff_weights_desc(), 2);
    bw_db.init(d.b, bias ? bw_pd.diff_bias_desc() : d.b, 3);
    bw_shape = sh;
    bw_bias = bias;
  }
};

}  // namespace

void linear_forward(OpCachePtr& cache, const LinearShape& sh, const Tensor& x, const Tensor& w, const Tensor* b,
                    Tensor& y) {
  auto& c = cache_as<LinearCpuCache>(cache);
  c.ensure_fwd(sh, b != nullptr);
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, c.fx.in(x.raw())},
      {DNNL_ARG_WEIGHTS, c.fw.in(w.raw())},
      {DNNL_ARG_DST, c.fy.out(y.raw(), false)},
      {DNNL_ARG_SCRATCHPAD, du::scratchpad(c.fwd_pd.scratchpad_desc())}};
  if (b) args.emplace(DNNL_ARG_BIAS, du::wrap(du::f32_desc({sh.out}, du::tag::x), *b));
  du::execute(c.fwd, args);
  c.fy.finish();
}

void linear_backward(OpCachePtr& cache, const LinearShape& sh, const Tensor& x, const Tensor& w, const Tensor& dy,
                     Tensor* dx, Tensor& dw, Tensor* db, bool accumulate) {
  auto& c = cache_as<LinearCpuCache>(cache);
  c.ensure_fwd(sh, c.fwd_shape && same_shape(*c.fwd_shape, sh) ? c.fwd_bias : false);
  c.ensure_bwd_weights(sh, db != nullptr);
  if (dx) c.ensure_bwd_data(sh);
  {
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC, c.bw_x.in(x.raw())},
        {DNNL_ARG_DIFF_DST, c.bw_dy.in(dy.raw())},
        {DNNL_ARG_DIFF_WEIGHTS, c.bw_dw.out(dw.raw(), accumulate)},
        {DNNL_ARG_SCRATCHPAD, du::scratchpad(c.bw_pd.scratchpad_desc())}};
    if (db) args.emplace(DNNL_ARG_DIFF_BIAS, c.bw_db.out(db->raw(), accumulate));
    du::execute(c.bw, args);
    c.bw_dw.finish();
    if (db) c.bw_db.finish();
  }
  if (dx) {
    std::unordered_map<int, memory> args{
        {DNNL_ARG_DIFF_DST, c.bd_dy.in(dy.raw())},
        {DNNL_ARG_WEIGHTS, c.bd_w.in(w.raw())},
        {DNNL_ARG_DIFF_SRC, c.bd_dx.out(dx->raw(), false)},
        {DNNL_ARG_SCRATCHPAD, du::scratchpad(c.bd_pd.scratchpad_desc())}};
    du::execute(c.bd, args);
    c.bd_dx.finish();
  }
}

}  // namespace ht::cpu
