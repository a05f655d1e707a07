#pragma once
// The op interface. Every op is a pair of free functions <op>_forward / <op>_backward declared once
// in src/ops/<op>.hpp. The public function dispatches on the input's device to ht::cpu::<op>_*
// (src/ops/<op>_cpu.cpp, oneDNN or own code) or ht::cuda::<op>_* (cuda/<op>.cu). A device without an
// implementation is an error, never a silent fallback to another device.
//
// Each call takes an OpCache slot owned by the calling layer: the implementation keeps what it
// builds once per shape there (oneDNN primitives, cuDNN descriptors and chosen algorithms,
// workspaces, saved statistics) and rebuilds it when the shape changes.
#include <memory>

#include "src/base/tensor.hpp"

namespace ht {

/// Per-layer, per-op state owned by the caller and filled by the implementation.
struct OpCache {
  virtual ~OpCache() = default;
};
using OpCachePtr = std::unique_ptr<OpCache>;

/// Returns the cache slot cast to T, creating it with T's default constructor when empty or of
/// another type.
template <class T> T& cache_as(OpCachePtr& slot) {
  if (auto* p = dynamic_cast<T*>(slot.get())) return *p;
  slot = std::make_unique<T>();
  return static_cast<T&>(*slot);
}

/// Throws UsageError-free RuntimeError naming the op when a tensor is on the wrong device or has
/// the wrong dtype/shape; used by the dispatchers.
void op_check(bool ok, const char* op, const std::string& what);

}  // namespace ht

/// Dispatch helper: HT_DISPATCH(x.device(), conv2d_forward, args...) calls ht::cpu::conv2d_forward
/// or ht::cuda::conv2d_forward, and throws when this build has no CUDA backend.
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
