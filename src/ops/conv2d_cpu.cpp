// CPU conv2d with oneDNN 2.6 convolution primitives (forward, backward data, backward weights +
// bias). bfloat16 (and float16, where oneDNN has kernels) activations are NHWC and given to the
// primitives as they are (no reorders between layers): bf16 source/destination, the float32 KCRS
// master filter rounded by a cached reorder into the bf16 layout the primitive picked (once per pass),
// float32 accumulation and float32 filter/bias gradients (reordered into KCRS, accumulated in f32).
// Float32 user tensors are plain NCHW / KCRS; the primitives may pick blocked internal layouts
// (format_tag::any, e.g. nChw16c / OIhw16i16o on AVX-512), in which case cached reorders convert
// at the boundary (dnnl_util::Staged). Primitives and reorders are built once per shape and kept
// in the caller's OpCache; a shape (or bias presence) change rebuilds them. Reordered copies live
// only within a call, in the thread's workspace slots (memory = max over layers, not the sum).
#include <cstdlib>
#include <cstring>
#include <optional>

#include "src/ops/conv2d.hpp"
#include "src/ops/dnnl_util.hpp"
#include "src/ops/dnnl_weighted_op.hpp"

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

/// The cache key: the shape with the dtypes of the activations (x and y share one).
struct ConvKey {
  Conv2dShape sh;
  DType t = DType::f32;
};

Plan plan_for(const ConvKey& key) {
  const Conv2dShape& sh = key.sh;
  Plan p;
  if (key.t != DType::f32) {  // NHWC as given, direct: oneDNN's bf16 kernels take channels-last
    p.any_layout = false;
    return p;
  }
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

bool same_shape(const ConvKey& ka, const ConvKey& kb) {
  const Conv2dShape &a = ka.sh, &b = kb.sh;
  return ka.t == kb.t && a.n == b.n && a.c == b.c && a.h == b.h && a.w == b.w && a.k == b.k && a.r == b.r && a.s == b.s &&
         a.stride == b.stride && a.pad == b.pad;
}

struct Descs {
  memory::dims x, w, bd, y, strides, pad;
  memory::desc x_any, w_any, y_any;
  memory::desc x_user, w_user, y_user, b, dw_any;
  explicit Descs(const ConvKey& key) {
    const Conv2dShape& sh = key.sh;
    x = {sh.n, sh.c, sh.h, sh.w};
    w = {sh.k, sh.c, sh.r, sh.s};
    bd = {sh.k};
    y = {sh.n, sh.k, sh.p(), sh.q()};
    strides = {sh.stride, sh.stride};
    pad = {sh.pad, sh.pad};
    const bool any = plan_for(key).any_layout;
    x_user = du::act_desc(x, key.t);
    w_user = du::f32_desc(w, du::tag::oihw);
    y_user = du::act_desc(y, key.t);
    x_any = any ? du::f32_desc(x, du::tag::any) : x_user;
    // Low precision: the filter in the activations' dtype, in the layout the kernel wants.
    w_any = key.t != DType::f32 ? memory::desc(w, du::dnnl_dtype(key.t), du::tag::any)
            : any               ? du::f32_desc(w, du::tag::any)
                                : w_user;
    y_any = any ? du::f32_desc(y, du::tag::any) : y_user;
    b = du::f32_desc(bd, du::tag::x);
    dw_any = key.t != DType::f32 ? du::f32_desc(w, du::tag::any) : w_any;  // float32 filter gradient
  }
};

/// The oneDNN convolution primitives for dnnl_util::WeightedOpCache.
struct ConvTraits : du::WeightedTraits<ConvKey, dnnl::convolution_forward, dnnl::convolution_backward_data,
                                    dnnl::convolution_backward_weights, Descs> {
  static bool same(const Shape& a, const Shape& b) { return same_shape(a, b); }
  static ConvKey key(const Conv2dShape& sh, DType x, DType) { return ConvKey{sh, x}; }

  static Fwd::primitive_desc fwd(const Shape& sh, bool bias) {
    const Descs d(sh);
    return make_pd<Fwd::primitive_desc>(plan_for(sh).algo, [&](dnnl::algorithm a) {
      const auto pk = dnnl::prop_kind::forward_training;
      return bias ? Fwd::desc(pk, a, d.x_any, d.w_any, d.b, d.y_any, d.strides, d.pad, d.pad)
                  : Fwd::desc(pk, a, d.x_any, d.w_any, d.y_any, d.strides, d.pad, d.pad);
    });
  }
  static BwdData::primitive_desc bwd_data(const Shape& sh, const Fwd::primitive_desc& hint) {
    const Descs d(sh);
    return make_pd<BwdData::primitive_desc>(
        plan_for(sh).algo,
        [&](dnnl::algorithm a) { return BwdData::desc(a, d.x_any, d.w_any, d.y_any, d.strides, d.pad, d.pad); },
        hint);
  }
  static BwdWeights::primitive_desc bwd_weights(const Shape& sh, bool bias, const Fwd::primitive_desc& hint) {
    const Descs d(sh);
    return make_pd<BwdWeights::primitive_desc>(
        plan_for(sh).algo,
        [&](dnnl::algorithm a) {
          return bias ? BwdWeights::desc(a, d.x_any, d.dw_any, d.b, d.y_any, d.strides, d.pad, d.pad)
                      : BwdWeights::desc(a, d.x_any, d.dw_any, d.y_any, d.strides, d.pad, d.pad);
        },
        hint);
  }
};

}  // namespace

const Conv2dHalf conv2d = du::weighted_op_half<ConvTraits, Conv2dShape>();

}  // namespace ht::cpu
