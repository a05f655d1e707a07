#pragma once
// The oneDNN plumbing shared by the CPU ops with weights, convolution and inner product (linear):
// forward, backward-data and backward-weights (+ bias) primitives with their staged operands
// (dnnl_util::Staged), built once per shape and bias choice, and the calls that run them. The op
// supplies a Traits type saying how to build each primitive descriptor (deriving from WeightedTraits
// below gives the type members and descs()):
//
//   struct Traits {
//     using Shape = ...;                 // e.g. Conv2dShape
//     using Fwd = ...; using BwdData = ...; using BwdWeights = ...;   // dnnl primitive types
//     struct Descs { memory::desc x_user, w_user, y_user, b; };       // plain user layouts
//     static bool same(const Shape&, const Shape&);
//     static Descs descs(const Shape&);
//     static Shape key(const OpShape&, DType x, DType y);   // the op's shape and activation dtypes
//     static typename Fwd::primitive_desc fwd(const Shape&, bool bias);
//     static typename BwdData::primitive_desc bwd_data(const Shape&, const typename Fwd::primitive_desc& hint);
//     static typename BwdWeights::primitive_desc bwd_weights(const Shape&, bool bias,
//                                                            const typename Fwd::primitive_desc& hint);
//   };
//
// Workspace slots: forward 0-2, backward weights 0-3, backward data 4-6 (dy is reordered once and
// shared by both backward primitives when they want the same layout).
// Source: oneDNN 2.6 C++ API (convolution_*, inner_product_*, primitive_desc queries).
#include <optional>
#include <unordered_map>
#include <utility>

#include "src/ops/dnnl_util.hpp"
#include "src/ops/op.hpp"

namespace ht::dnnl_util {

/// The type half of a Traits type (the header comment): the shape, the three primitive types and the
/// user descriptors, built by Descs(sh). An op's Traits derives from it and adds same() and the three
/// primitive descriptor builders.
template <class ShapeT, class FwdT, class BwdDataT, class BwdWeightsT, class DescsT>
struct WeightedTraits {
  using Shape = ShapeT;
  using Fwd = FwdT;
  using BwdData = BwdDataT;
  using BwdWeights = BwdWeightsT;
  using Descs = DescsT;
  static Descs descs(const Shape& sh) { return Descs(sh); }
};

template <class Traits>
struct WeightedOpCache : OpCache {
  using Shape = typename Traits::Shape;
  using Fwd = typename Traits::Fwd;
  using BwdData = typename Traits::BwdData;
  using BwdWeights = typename Traits::BwdWeights;

  /// One primitive with the shape and bias choice it was built for.
  template <class Prim>
  struct Pass {
    std::optional<Shape> shape;
    bool bias = false;
    typename Prim::primitive_desc pd;
    Prim prim;
    /// Whether it was built for sh and bias.
    bool serves(const Shape& sh, bool b) const { return shape && Traits::same(*shape, sh) && bias == b; }
    /// Makes the primitive of desc, runs stage(pd) (the operands' init), then records sh and b (so a
    /// throw on the way leaves the pass to be rebuilt).
    template <class Stage>
    void build(typename Prim::primitive_desc desc, const Shape& sh, bool b, Stage stage) {
      pd = std::move(desc);
      prim = Prim(pd);
      stage(pd);
      shape = sh;
      bias = b;
    }
  };

  Pass<Fwd> fp;  // forward, also the hint of both backward primitives
  Staged fx, fw, fy;
  memory::desc b_md;  // the bias's plain descriptor, built with the forward
  Pass<BwdData> bdp;  // backward data (bias always false)
  Staged bd_dy, bd_w, bd_dx;
  Pass<BwdWeights> bwp;  // backward weights (+ bias)
  Staged bw_x, bw_dy, bw_dw, bw_db;

  /// y = op(x, w) (+ b): raw pointers into plain user tensors.
  void forward(const Shape& sh, const void* x, const void* w, const void* b, void* y) {
    ensure_fwd(sh, b != nullptr);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, fx.in(x)},
                                         {DNNL_ARG_WEIGHTS, fw.in(w)},
                                         {DNNL_ARG_DST, fy.out(y, false)},
                                         {DNNL_ARG_SCRATCHPAD, scratchpad(fp.pd.scratchpad_desc())}};
    if (b) args.emplace(DNNL_ARG_BIAS, wrap(b_md, const_cast<void*>(b)));
    execute(fp.prim, args);
    fy.finish();
  }

  /// dw and db (when not null; both += when accumulate) and dx (when not null) from x, w, dy.
  void backward(const Shape& sh, const void* x, const void* w, const void* dy, void* dx, void* dw, void* db,
                bool accumulate) {
    // The backward primitives need the forward primitive descriptor as a hint; keep the forward's
    // bias choice if it was built for this shape (bias does not change the chosen layouts).
    ensure_fwd(sh, fp.shape && Traits::same(*fp.shape, sh) ? fp.bias : false);
    ensure_bwd_weights(sh, db != nullptr);
    if (dx) ensure_bwd_data(sh);
    // Backward weights first: dy is reordered once when both primitives want the same layout.
    memory mdy = bw_dy.in(dy);
    {
      std::unordered_map<int, memory> args{{DNNL_ARG_SRC, bw_x.in(x)},
                                           {DNNL_ARG_DIFF_DST, mdy},
                                           {DNNL_ARG_DIFF_WEIGHTS, bw_dw.out(dw, accumulate)},
                                           {DNNL_ARG_SCRATCHPAD, scratchpad(bwp.pd.scratchpad_desc())}};
      if (db) args.emplace(DNNL_ARG_DIFF_BIAS, bw_db.out(db, accumulate));
      execute(bwp.prim, args);
      bw_dw.finish();
      if (db) bw_db.finish();
    }
    if (dx) {
      const bool share = bw_dy.want_desc() == bd_dy.want_desc();
      std::unordered_map<int, memory> args{{DNNL_ARG_DIFF_DST, share ? mdy : bd_dy.in(dy)},
                                           {DNNL_ARG_WEIGHTS, bd_w.in(w)},
                                           {DNNL_ARG_DIFF_SRC, bd_dx.out(dx, false)},
                                           {DNNL_ARG_SCRATCHPAD, scratchpad(bdp.pd.scratchpad_desc())}};
      execute(bdp.prim, args);
      bd_dx.finish();
    }
  }

 private:
  void ensure_fwd(const Shape& sh, bool bias) {
    if (fp.serves(sh, bias)) return;
    const auto d = Traits::descs(sh);
    fp.build(Traits::fwd(sh, bias), sh, bias, [&](const auto& pd) {
      fx.init(d.x_user, pd.src_desc(), 0);
      fw.init(d.w_user, pd.weights_desc(), 1);
      fy.init(d.y_user, pd.dst_desc(), 2);
    });
    b_md = d.b;
    bdp.shape.reset();  // the backward primitives were hinted by the old forward
    bwp.shape.reset();
  }

  void ensure_bwd_data(const Shape& sh) {
    if (bdp.serves(sh, false)) return;
    const auto d = Traits::descs(sh);
    bdp.build(Traits::bwd_data(sh, fp.pd), sh, false, [&](const auto& pd) {
      bd_dy.init(d.y_user, pd.diff_dst_desc(), 4);
      bd_w.init(d.w_user, pd.weights_desc(), 5);
      bd_dx.init(d.x_user, pd.diff_src_desc(), 6);
    });
  }

  void ensure_bwd_weights(const Shape& sh, bool bias) {
    if (bwp.serves(sh, bias)) return;
    const auto d = Traits::descs(sh);
    bwp.build(Traits::bwd_weights(sh, bias, fp.pd), sh, bias, [&](const auto& pd) {
      bw_x.init(d.x_user, pd.src_desc(), 0);
      bw_dy.init(d.y_user, pd.diff_dst_desc(), 1);
      bw_dw.init(d.w_user, pd.diff_weights_desc(), 2);
      bw_db.init(d.b, bias ? pd.diff_bias_desc() : d.b, 3);
    });
  }
};

/// The CPU halves (src/ops/conv2d.hpp, src/ops/linear.hpp: <op>_forward_cpu, <op>_backward_cpu) of
/// the op that Traits describes: forward and backward run through the WeightedOpCache<Traits> kept in
/// the op's cache slot (null b, dx, db: not computed). Traits::Shape is the cache key: the op's shape
/// with the activation dtypes (Traits::key).
template <class Traits, class OpShape>
void weighted_op_forward(OpCachePtr& cache, const OpShape& sh, const Tensor& x, const Tensor& w, const Tensor* b,
                         Tensor& y) {
  cache_as<WeightedOpCache<Traits>>(cache).forward(Traits::key(sh, x.dtype(), y.dtype()), x.raw(), w.raw(),
                                                   b ? b->raw() : nullptr, y.raw());
}
template <class Traits, class OpShape>
void weighted_op_backward(OpCachePtr& cache, const OpShape& sh, const Tensor& x, const Tensor& w, const Tensor& dy,
                          Tensor* dx, Tensor& dw, Tensor* db, bool accumulate) {
  cache_as<WeightedOpCache<Traits>>(cache).backward(Traits::key(sh, x.dtype(), dy.dtype()), x.raw(), w.raw(),
                                                    dy.raw(), dx ? dx->raw() : nullptr, dw.raw(),
                                                    db ? db->raw() : nullptr, accumulate);
}

}  // namespace ht::dnnl_util
