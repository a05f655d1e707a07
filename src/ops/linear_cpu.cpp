// CPU linear with oneDNN 2.6 inner product primitives (forward, backward data, backward weights +
// bias). x [N,in] and y [N,out] stay plain; the weights may be given a layout chosen by oneDNN
// (format_tag::any), reordered from/to the user's [out,in] by cached reorders (dnnl_util::Staged).
// Primitives are built once per shape and kept in the caller's OpCache; a shape change rebuilds.
#include <cstdlib>
#include <cstring>
#include <optional>

#include "src/ops/dnnl_util.hpp"
#include "src/ops/dnnl_weighted_op.hpp"
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
  memory::desc x_user, w_user, w_any, b, y_user;
  explicit Descs(const LinearShape& sh) {
    x_user = du::f32_desc({sh.n, sh.in}, du::tag::nc);
    y_user = du::f32_desc({sh.n, sh.out}, du::tag::nc);
    w_user = du::f32_desc({sh.out, sh.in}, du::tag::oi);
    w_any = use_any_weights() ? du::f32_desc({sh.out, sh.in}, du::tag::any) : w_user;
    b = du::f32_desc({sh.out}, du::tag::x);
  }
};

/// The oneDNN inner-product primitives for dnnl_util::WeightedOpCache.
struct LinearTraits : du::WeightedTraits<LinearShape, dnnl::inner_product_forward, dnnl::inner_product_backward_data,
                                    dnnl::inner_product_backward_weights, Descs> {
  static bool same(const Shape& a, const Shape& b) { return same_shape(a, b); }

  static Fwd::primitive_desc fwd(const Shape& sh, bool bias) {
    const Descs d(sh);
    const auto pk = dnnl::prop_kind::forward_training;
    auto desc = bias ? Fwd::desc(pk, d.x_user, d.w_any, d.b, d.y_user) : Fwd::desc(pk, d.x_user, d.w_any, d.y_user);
    return Fwd::primitive_desc(desc, du::scratchpad_attr(), du::engine());
  }
  static BwdData::primitive_desc bwd_data(const Shape& sh, const Fwd::primitive_desc& hint) {
    const Descs d(sh);
    return BwdData::primitive_desc(BwdData::desc(d.x_user, d.w_any, d.y_user), du::scratchpad_attr(), du::engine(),
                                   hint);
  }
  static BwdWeights::primitive_desc bwd_weights(const Shape& sh, bool bias, const Fwd::primitive_desc& hint) {
    const Descs d(sh);
    auto desc = bias ? BwdWeights::desc(d.x_user, d.w_any, d.b, d.y_user) : BwdWeights::desc(d.x_user, d.w_any, d.y_user);
    return BwdWeights::primitive_desc(desc, du::scratchpad_attr(), du::engine(), hint);
  }
};

}  // namespace

const LinearHalf linear = du::weighted_op_half<LinearTraits>();

}  // namespace ht::cpu
