#pragma once
// The op interface. Every op is a set of free functions (<op>_forward / <op>_backward, ...) declared
// once in src/ops/<op>.hpp and defined in src/ops/<op>.cpp, which validates the arguments once for
// both devices (OpArgs below) and calls the half of the input's device: <op>_forward_cpu (further
// down the same src/ops/<op>.cpp, oneDNN or own code) or <op>_forward_gpu (src/ops/<op>_gpu.cu,
// cuDNN, cuBLAS or own kernels), plain functions declared next to the public one in src/ops/<op>.hpp. The GPU
// halves are defined in CUDA builds only (HT_HAVE_CUDA), so a dispatcher calls one only under
// `if constexpr (kHaveCuda)` (a discarded branch in a CPU build: not compiled to a call, not linked)
// and otherwise throws no_cuda (below). The halves trust their arguments
// and check only what their library adds. A device without an implementation is an error, never a
// silent fallback. The shapes are in src/ops/op_shapes.hpp.
//
// Each call takes an OpCache slot (src/ops/op_cache.hpp) owned by the calling layer.
//
// Precision (issue 13; the table of what runs in which precision is docs/precision.md): the
// activations carry the compute dtype. A 4-D activation [N,C,H,W] of dtype float32 is NCHW in
// memory; of dtype bfloat16 or float16 it is NHWC (channels-last): the shape stays the logical
// [N,C,H,W]. 2-D activations [N,F] are row-major in every dtype. A half learns the precision of a
// call from its input x. Parameters (w, b, gamma, beta), their gradients (dw, db, dgamma, dbeta) and
// the batch-norm statistics are float32 always (the master copies); a half that computes in low
// precision makes its low-precision copy of w itself (kept in the op cache, in its library's
// preferred layout) and accumulates in float32. Per family: conv2d x, y, dy, dx of one dtype;
// linear x and dx of one dtype, y and dy float32 or x's dtype; batch norm, max pool, relu, add: one
// dtype for all activations; global average pool: y [N,C] of x's dtype; softmax_xent, sgd,
// scale_inplace, add_inplace, count_nonfinite: float32.
#include <string>
#include <vector>

#include "base/error.hpp"
#include "src/ops/op_cache.hpp"
#include "src/ops/op_check.hpp"
#include "src/ops/op_shapes.hpp"
#include "base/tensor.hpp"

namespace ht {

/// Validation of one op call, done by the dispatcher before either half runs. The call's device is
/// that of `first`; every tensor checked must be defined and live on it. Each check throws
/// RuntimeError "<op>(<device>): <name> ..." naming the tensor, what it is and what was expected.
class OpArgs {
 public:
  OpArgs(const char* op, const Tensor& first);
  Device device() const { return dev_; }
  /// t is float32 on the call's device with exactly `shape`.
  const OpArgs& f32(const Tensor& t, const char* name, const std::vector<int64_t>& shape) const;
  /// t is float32 on the call's device (any shape).
  const OpArgs& f32(const Tensor& t, const char* name) const;
  /// t is an activation: float32, bfloat16 or float16 on the call's device with exactly `shape`
  /// (4-D: NCHW memory order in float32, NHWC in bf16/fp16; see the header comment).
  const OpArgs& act(const Tensor& t, const char* name, const std::vector<int64_t>& shape) const;
  /// t is an activation (as above) of any shape.
  const OpArgs& act(const Tensor& t, const char* name) const;
  /// a and b have the same dtype.
  const OpArgs& same_dtype(const Tensor& a, const char* na, const Tensor& b, const char* nb) const;
  /// t is int32 on the call's device (any shape).
  const OpArgs& i32(const Tensor& t, const char* name) const;
  /// a and b hold the same number of elements.
  const OpArgs& same_numel(const Tensor& a, const char* na, const Tensor& b, const char* nb) const;
  /// Throws "<op>(<device>): <what()>" unless ok. `what` is a callable returning the message, so the
  /// text is built only on failure: the checks run on every op call of every training step.
  template <class Message>
  const OpArgs& require(bool ok, Message&& what) const {
    if (!ok) fail(std::string(what()));
    return *this;
  }

 private:
  const OpArgs& on_device(const Tensor& t, const char* name) const;
  const OpArgs& has_shape(const Tensor& t, const char* name, const std::vector<int64_t>& shape) const;
  [[noreturn]] void fail(const std::string& what) const;
  const char* op_;
  Device dev_;
};

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
// float32 (the master parameters and gradients; see the header comment).
//
// x(), w(), y() and b() are called only after valid() has held. The op's two public functions
// (src/ops/conv2d.cpp, src/ops/linear.cpp) call weighted_forward_args / weighted_backward_args, then
// the half of the returned device.

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

namespace ht {
/// Whether this build has the GPU halves (HT_HAVE_CUDA).
#if defined(HT_HAVE_CUDA)
inline constexpr bool kHaveCuda = true;
#else
inline constexpr bool kHaveCuda = false;
#endif

/// Throws "<op>: this hpctrain was built without CUDA": what a dispatcher does with a CUDA tensor in a
/// build without CUDA (`if constexpr (kHaveCuda) return conv2d_forward_gpu(...); no_cuda("conv2d_forward");`).
[[noreturn]] inline void no_cuda(const char* op) {
  throw RuntimeError(std::string(op) + ": this hpctrain was built without CUDA");
}
}  // namespace ht
