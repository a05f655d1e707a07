#pragma once
// The per-layer cache slot every op takes: the implementation (CPU or GPU half) keeps what it builds
// once per shape there (oneDNN primitives, cuDNN descriptors and chosen algorithms, workspaces,
// saved statistics) and rebuilds it when the shape changes. Part of the op vocabulary that both
// device halves share, so it sits in the base.
#include <memory>

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

}  // namespace ht
