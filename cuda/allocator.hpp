#pragma once
// The CUDA tensor allocator (registered by ht::cuda::init through ht::register_allocator) and the
// out-of-memory diagnosis. Allocation is stream-ordered on the compute stream (cudaMallocAsync /
// cudaFreeAsync from the device's default memory pool, kept cached rather than released), so freeing
// a temporary never synchronises the device.
//
// The "current layer" is a thread-local name the model sets around each layer's forward/backward
// (CurrentLayer guard) so an out-of-memory error can say which layer asked. It exists in every
// build (a plain string in CPU builds).
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/bytes.hpp"

namespace ht::cuda {

/// Sets this thread's current layer name (empty = none).
void set_current_layer(std::string name);
/// This thread's current layer name ("" when none).
const std::string& current_layer();

/// RAII: sets the current layer for a scope and restores the previous one.
class CurrentLayer {
 public:
  explicit CurrentLayer(std::string name);
  ~CurrentLayer();
  CurrentLayer(const CurrentLayer&) = delete;
  CurrentLayer& operator=(const CurrentLayer&) = delete;

 private:
  std::string prev_;
};

/// The out-of-memory message: layer (or "outside any layer"), bytes asked for, free and total device
/// memory, memory our pool holds, and the remedies (smaller micro-batch with more accumulation steps,
/// bf16, named as not yet available). Pure function; used by the allocator and tested on the CPU.
std::string oom_message(const std::string& layer, size_t bytes_requested, size_t free_bytes, size_t total_bytes,
                        size_t pool_reserved_bytes, int device);


/// Device memory held by the allocator (reserved by the pool, in use by tensors, peak in use).
struct MemoryStats {
  uint64_t reserved_bytes = 0;
  uint64_t used_bytes = 0;
  uint64_t peak_used_bytes = 0;
};
/// Current statistics; all zero in CPU builds or before init.
MemoryStats memory_stats();

#if defined(HT_HAVE_CUDA)
/// Allocates device memory on the compute stream; throws RuntimeError with oom_message() on
/// cudaErrorMemoryAllocation (after one retry that returns the pool's cached blocks to the driver).
void* device_alloc(size_t bytes);
/// Frees memory from device_alloc, ordered after the compute stream's work so far.
void device_free(void* p);
/// Registers device_alloc/device_free, copies and memset for Device::cuda (called by init()).
void register_cuda_allocator();
#endif

}  // namespace ht::cuda
