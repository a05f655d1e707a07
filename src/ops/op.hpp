#pragma once
// The op interface. Every op is a pair of free functions <op>_forward / <op>_backward declared once
// in src/ops/<op>.hpp and defined in src/ops/<op>.cpp, which validates the arguments once for both
// devices (OpArgs below) and dispatches on the input's device to the CPU half ht::cpu::<op>_*
// (src/ops/<op>_cpu.cpp, oneDNN or own code) or the GPU half ht::cuda::<op>_* (declared in
// cuda/<op>.hpp, defined in cuda/<op>.cu). The halves trust their arguments and check only what
// their library adds. A device without an implementation is an error, never a silent fallback.
//
// Each call takes an OpCache slot (src/base/op_cache.hpp) owned by the calling layer.
#include <string>
#include <vector>

#include "src/base/op_cache.hpp"
#include "src/base/op_check.hpp"
#include "src/base/op_shapes.hpp"
#include "src/base/tensor.hpp"

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
  /// t is int32 on the call's device (any shape).
  const OpArgs& i32(const Tensor& t, const char* name) const;
  /// a and b hold the same number of elements.
  const OpArgs& same_numel(const Tensor& a, const char* na, const Tensor& b, const char* nb) const;
  /// Throws "<op>(<device>): <what>" unless ok.
  const OpArgs& require(bool ok, const std::string& what) const;

 private:
  const OpArgs& on_device(const Tensor& t, const char* name) const;
  std::string op_;
  Device dev_;
};

}  // namespace ht

/// HT_DISPATCH(dev, conv2d_forward, args...) calls ht::cpu::conv2d_forward or ht::cuda::conv2d_forward
/// (the dispatcher's .cpp includes cuda/<op>.hpp), and throws when this build has no CUDA backend.
#if defined(HT_HAVE_CUDA)
#define HT_DISPATCH(dev, fn, ...)                                              \
  do {                                                                         \
    if ((dev) == ::ht::Device::cpu) { ::ht::cpu::fn(__VA_ARGS__); }            \
    else { ::ht::cuda::fn(__VA_ARGS__); }                                      \
  } while (0)
#else
#define HT_DISPATCH(dev, fn, ...)                                              \
  do {                                                                         \
    if ((dev) == ::ht::Device::cpu) { ::ht::cpu::fn(__VA_ARGS__); }            \
    else { throw ::ht::RuntimeError(#fn ": this hpctrain was built without CUDA"); } \
  } while (0)
#endif
