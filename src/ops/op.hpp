#pragma once
// The op interface. Every op is a pair of free functions <op>_forward / <op>_backward declared once
// in src/ops/<op>.hpp and defined in src/ops/<op>.cpp, which validates the arguments once for both
// devices (OpArgs below) and dispatches on the input's device (HT_DISPATCH below) to the CPU half
// ht::cpu::<family> (src/ops/<op>_cpu.cpp, oneDNN or own code) or the GPU half ht::cuda::<family>
// (cuda/<op>.cu): tables of the same type, declared once in src/ops/op_halves.hpp. The halves trust
// their arguments and check only what their library adds. A device without an implementation is an
// error, never a silent fallback.
//
// Each call takes an OpCache slot (src/ops/op_cache.hpp) owned by the calling layer.
#include <string>
#include <vector>

#include "base/error.hpp"
#include "src/ops/op_cache.hpp"
#include "src/ops/op_check.hpp"
#include "src/ops/op_halves.hpp"
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
  /// (4-D: NCHW memory order in float32, NHWC in bf16/fp16; see src/ops/op_halves.hpp).
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
  [[noreturn]] void fail(const std::string& what) const;
  const char* op_;
  Device dev_;
};

}  // namespace ht

namespace ht {
/// Throws "<op>: this hpctrain was built without CUDA": the GPU branch of a dispatcher in a build
/// without CUDA.
[[noreturn]] inline void no_cuda(const char* op) {
  throw RuntimeError(std::string(op) + ": this hpctrain was built without CUDA");
}
/// As no_cuda, typed R so that the GPU branch has the type of the CPU one (HT_DISPATCH only).
template <class R>
[[noreturn]] R no_cuda_half(const char* op) {
  no_cuda(op);
}
}  // namespace ht

/// HT_DISPATCH(dev, "conv2d_forward", conv2d.forward, args...) is the call of the half for `dev`:
/// ht::cpu::conv2d.forward(args...) or ht::cuda::conv2d.forward(args...) (tables declared in
/// src/ops/op_halves.hpp), an expression of the half's result type; in a build without CUDA the GPU
/// branch throws "conv2d_forward: this hpctrain was built without CUDA".
#if defined(HT_HAVE_CUDA)
#define HT_DISPATCH(dev, op_name, half, ...) \
  ((dev) == ::ht::Device::cpu ? ::ht::cpu::half(__VA_ARGS__) : ::ht::cuda::half(__VA_ARGS__))
#else
#define HT_DISPATCH(dev, op_name, half, ...)                   \
  ((dev) == ::ht::Device::cpu ? ::ht::cpu::half(__VA_ARGS__) \
                              : ::ht::no_cuda_half<decltype(::ht::cpu::half(__VA_ARGS__))>(op_name))
#endif
