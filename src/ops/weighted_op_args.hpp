#pragma once
// The argument checks of the ops with weights (conv2d, linear), written once: the op supplies a Dims
// type saying when its shape is valid and the dims of each tensor:
//
//   struct Dims {
//     using Shape = ...;                                   // e.g. Conv2dShape
//     static bool valid(const Shape&);                     // every size positive (and the like)
//     static std::string describe(const Shape&);           // "N=.. C=.. ..." for the error text
//     static std::vector<int64_t> x(const Shape&), w(const Shape&), y(const Shape&), b(const Shape&);
//     static constexpr bool kSameDtypeY;                   // y/dy must have x's dtype (conv2d)
//   };
// Activations x, y, dy, dx are float32, bfloat16 or float16 (dx of x's dtype); w, b, dw, db are
// float32 (the master parameters and gradients; see src/ops/op.hpp).
//
// x(), w(), y() and b() are called only after valid() has held. The op's two public functions
// (src/ops/conv2d.cpp, src/ops/linear.cpp) call weighted_forward_args / weighted_backward_args, then
// the half of the returned device.
#include <string>

#include "src/ops/op.hpp"

namespace ht {

/// Checks sh (RuntimeError "<op>(<device>): invalid shape ...") and x, w against it.
template <class Dims>
OpArgs weighted_op_args(const char* op, const typename Dims::Shape& sh, const Tensor& x, const Tensor& w) {
  OpArgs a(op, x);
  a.require(Dims::valid(sh), [&] { return std::string("invalid shape " + Dims::describe(sh)); });
  a.act(x, "x", Dims::x(sh)).f32(w, "w", Dims::w(sh));
  return a;
}

/// Validates a forward call y = op(x, w) (+ b): sh, then x, w, b (when not null), y. Returns the
/// checked arguments (their device picks the half).
template <class Dims>
OpArgs weighted_forward_args(const char* op, const typename Dims::Shape& sh, const Tensor& x, const Tensor& w,
                             const Tensor* b, const Tensor& y) {
  const OpArgs a = weighted_op_args<Dims>(op, sh, x, w);
  if (b) a.f32(*b, "b", Dims::b(sh));
  a.act(y, "y", Dims::y(sh));
  if (Dims::kSameDtypeY) a.same_dtype(x, "x", y, "y");
  return a;
}

/// Validates a backward call: sh, then x, w, dy, dw, dx (when not null), db (when not null).
template <class Dims>
OpArgs weighted_backward_args(const char* op, const typename Dims::Shape& sh, const Tensor& x, const Tensor& w,
                              const Tensor& dy, const Tensor* dx, const Tensor& dw, const Tensor* db) {
  const OpArgs a = weighted_op_args<Dims>(op, sh, x, w);
  a.act(dy, "dy", Dims::y(sh)).f32(dw, "dw", Dims::w(sh));
  if (Dims::kSameDtypeY) a.same_dtype(x, "x", dy, "dy");
  if (dx) a.act(*dx, "dx", Dims::x(sh)).same_dtype(x, "x", *dx, "dx");
  if (db) a.f32(*db, "db", Dims::b(sh));
  return a;
}

}  // namespace ht
