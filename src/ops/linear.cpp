// linear: the dispatcher (arguments checked once, then this file's CPU half or the GPU half in
// src/ops/linear_gpu.cu, CUDA builds only) and the CPU half.
#include "src/ops/linear.hpp"

#include <cstdlib>
#include <cstring>
#include <optional>

#include "src/ops/op.hpp"
#include "src/ops/dnnl_util.hpp"
#include "src/ops/dnnl_weighted_op.hpp"

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
  if constexpr (kHaveCuda) return linear_forward_gpu(cache, sh, x, w, b, y);
  no_cuda("linear_forward");
}

void linear_backward(OpCachePtr& cache, const LinearShape& sh, const Tensor& x, const Tensor& w, const Tensor& dy,
                     Tensor* dx, Tensor& dw, Tensor* db, bool accumulate) {
  const OpArgs a = weighted_backward_args<LinearDims>("linear_backward", sh, x, w, dy, dx, dw, db);
  if (a.device() == Device::cpu) return linear_backward_cpu(cache, sh, x, w, dy, dx, dw, db, accumulate);
  if constexpr (kHaveCuda) return linear_backward_gpu(cache, sh, x, w, dy, dx, dw, db, accumulate);
  no_cuda("linear_backward");
}

}  // namespace ht

// ---- The CPU half ----
// CPU linear with oneDNN 2.6 inner product primitives (forward, backward data, backward weights +
// bias). x [N,in] and y [N,out] stay plain; the weights may be given a layout chosen by oneDNN
// (format_tag::any), reordered from/to the user's [out,in] by cached reorders (dnnl_util::Staged).
// Primitives are built once per shape and kept in the caller's OpCache; a shape change rebuilds.
// bfloat16 x: bf16 source and weights (the float32 master rounded by a cached reorder, once per pass),
// float32 accumulation, y float32 or bf16 as the caller's tensor, a float32 dy rounded to bf16 for
// the backward primitives (oneDNN's bf16 kernels take one type), float32 dw/db.
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

/// The cache key: the shape with the dtypes of x and y.
struct LinearKey {
  LinearShape sh;
  DType x = DType::f32, y = DType::f32;
};

bool same_shape(const LinearKey& a, const LinearKey& b) {
  return a.x == b.x && a.y == b.y && a.sh.n == b.sh.n && a.sh.in == b.sh.in && a.sh.out == b.sh.out;
}

struct Descs {
  memory::desc x_user, w_user, w_any, dw_any, b, y_user, y_prim;
  explicit Descs(const LinearKey& key) {
    const LinearShape& sh = key.sh;
    const bool lowp = key.x != DType::f32;
    x_user = memory::desc({sh.n, sh.in}, du::dnnl_dtype(key.x), du::tag::nc);
    y_user = memory::desc({sh.n, sh.out}, du::dnnl_dtype(key.y), du::tag::nc);
    w_user = du::f32_desc({sh.out, sh.in}, du::tag::oi);
    w_any = lowp                ? memory::desc({sh.out, sh.in}, du::dnnl_dtype(key.x), du::tag::any)
            : use_any_weights() ? du::f32_desc({sh.out, sh.in}, du::tag::any)
                                : w_user;
    dw_any = lowp ? du::f32_desc({sh.out, sh.in}, du::tag::any) : w_any;
    b = du::f32_desc({sh.out}, du::tag::x);
    // The backward primitives take dy in x's dtype (forward writes y in its own).
    y_prim = lowp ? memory::desc({sh.n, sh.out}, du::dnnl_dtype(key.x), du::tag::nc) : y_user;
  }
};

/// The oneDNN inner-product primitives for dnnl_util::WeightedOpCache.
struct LinearTraits : du::WeightedTraits<LinearKey, dnnl::inner_product_forward, dnnl::inner_product_backward_data,
                                    dnnl::inner_product_backward_weights, Descs> {
  static bool same(const Shape& a, const Shape& b) { return same_shape(a, b); }
  static LinearKey key(const LinearShape& sh, DType x, DType y) { return LinearKey{sh, x, y}; }

  static Fwd::primitive_desc fwd(const Shape& sh, bool bias) {
    const Descs d(sh);
    const auto pk = dnnl::prop_kind::forward_training;
    auto desc = bias ? Fwd::desc(pk, d.x_user, d.w_any, d.b, d.y_user) : Fwd::desc(pk, d.x_user, d.w_any, d.y_user);
    return Fwd::primitive_desc(desc, du::scratchpad_attr(), du::engine());
  }
  static BwdData::primitive_desc bwd_data(const Shape& sh, const Fwd::primitive_desc& hint) {
    const Descs d(sh);
    return BwdData::primitive_desc(BwdData::desc(d.x_user, d.w_any, d.y_prim), du::scratchpad_attr(), du::engine(),
                                   hint);
  }
  static BwdWeights::primitive_desc bwd_weights(const Shape& sh, bool bias, const Fwd::primitive_desc& hint) {
    const Descs d(sh);
    auto desc = bias ? BwdWeights::desc(d.x_user, d.dw_any, d.b, d.y_prim) : BwdWeights::desc(d.x_user, d.dw_any, d.y_prim);
    return BwdWeights::primitive_desc(desc, du::scratchpad_attr(), du::engine(), hint);
  }
};

}  // namespace

}  // namespace ht::cpu

namespace ht {

// The CPU halves declared in src/ops/linear.hpp.
void linear_forward_cpu(OpCachePtr& cache, const LinearShape& sh, const Tensor& x, const Tensor& w, const Tensor* b,
                        Tensor& y) {
  dnnl_util::weighted_op_forward<cpu::LinearTraits>(cache, sh, x, w, b, y);
}
void linear_backward_cpu(OpCachePtr& cache, const LinearShape& sh, const Tensor& x, const Tensor& w, const Tensor& dy,
                         Tensor* dx, Tensor& dw, Tensor* db, bool accumulate) {
  dnnl_util::weighted_op_backward<cpu::LinearTraits>(cache, sh, x, w, dy, dx, dw, db, accumulate);
}

}  // namespace ht
