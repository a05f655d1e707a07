// CUDA tensor allocator and out-of-memory diagnosis (see allocator.hpp). Host code only, compiled in
// every build; the CUDA part is guarded by HT_HAVE_CUDA.
#include "cuda/allocator.hpp"

#include <atomic>
#include <cstdio>
#include <sstream>

#include "base/bytes.hpp"
#include "base/error.hpp"
#include "base/tensor.hpp"

#if defined(HT_HAVE_CUDA)
#include <mutex>
#include <unordered_map>

#include "cuda/check.hpp"
#include "cuda/cuda_context.hpp"
#endif

namespace ht::cuda {

namespace {
thread_local std::string t_layer;
}  // namespace

void set_current_layer(std::string name) { t_layer = std::move(name); }
const std::string& current_layer() { return t_layer; }

CurrentLayer::CurrentLayer(std::string name) : prev_(t_layer) { t_layer = std::move(name); }
CurrentLayer::~CurrentLayer() { t_layer = std::move(prev_); }

std::string oom_message(const std::string& layer, size_t bytes_requested, size_t free_bytes, size_t total_bytes,
                        size_t pool_reserved_bytes, int device) {
  std::ostringstream os;
  os << "CUDA out of memory on device " << device << " in "
     << (layer.empty() ? std::string("(outside any layer)") : "layer '" + layer + "'") << ": tried to allocate "
     << format_bytes(bytes_requested) << " (" << bytes_requested << " bytes); the device has "
     << format_bytes(free_bytes) << " free of " << format_bytes(total_bytes) << " total, and hpctrain's pool holds "
     << format_bytes(pool_reserved_bytes)
     << ". Remedies: lower the micro-batch and raise train.accumulation_steps by the same factor "
        "(micro-batch = train.global_batch / (world_size x train.accumulation_steps); the global batch and the "
        "results stay the same); where the run is in fp32 or tf32, train.precision = bf16 (mixed precision: bf16 "
        "activations, fp32 master weights) about halves activation memory; check that no other process uses this "
        "GPU (nvidia-smi).";
  return os.str();
}

#if !defined(HT_HAVE_CUDA)

MemoryStats memory_stats() { return {}; }

#else

namespace {
std::mutex g_mu;
std::unordered_map<void*, size_t> g_sizes;  // live allocations (for used/peak statistics)
uint64_t g_used = 0, g_peak = 0;

void record_alloc(void* p, size_t bytes) {
  std::lock_guard<std::mutex> lk(g_mu);
  g_sizes[p] = bytes;
  g_used += bytes;
  if (g_used > g_peak) g_peak = g_used;
}
void record_free(void* p) {
  std::lock_guard<std::mutex> lk(g_mu);
  auto it = g_sizes.find(p);
  if (it == g_sizes.end()) return;
  g_used -= it->second;
  g_sizes.erase(it);
}

uint64_t pool_reserved(int dev) {
  cudaMemPool_t pool;
  uint64_t v = 0;
  if (cudaDeviceGetDefaultMemPool(&pool, dev) == cudaSuccess)
    (void)cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &v);
  return v;
}
}  // namespace

MemoryStats memory_stats() {
  MemoryStats s;
  if (!initialized()) return s;
  s.reserved_bytes = pool_reserved(device());
  std::lock_guard<std::mutex> lk(g_mu);
  s.used_bytes = g_used;
  s.peak_used_bytes = g_peak;
  return s;
}

void* device_alloc(size_t bytes) {
  Context& c = ctx();
  if (bytes == 0) bytes = 256;  // a distinct valid pointer for empty tensors
  void* p = nullptr;
  cudaError_t rc = cudaMallocAsync(&p, bytes, c.compute);
  if (rc == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    // Return the pool's cached blocks to the driver (fragmentation) and try once more.
    cudaMemPool_t pool;
    HT_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, c.device));
    HT_CUDA_CHECK(cudaStreamSynchronize(c.compute));
    HT_CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
    rc = cudaMallocAsync(&p, bytes, c.compute);
  }
  if (rc == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    (void)cudaMemGetInfo(&free_b, &total_b);
    throw RuntimeError(oom_message(current_layer(), bytes, free_b, total_b, pool_reserved(c.device), c.device));
  }
  HT_CUDA_CHECK(rc);
  record_alloc(p, bytes);
  return p;
}

void device_free(void* p) {
  if (!p) return;
  record_free(p);
  // Never throw: this runs in Tensor destructors (noexcept), also at exit after the CUDA runtime
  // may have unloaded, where ctx() (cudaSetDevice) would throw and terminate. A failed free then is
  // harmless.
  cudaStream_t s = nullptr;
  try {
    s = ctx().compute;
  } catch (...) {
    return;
  }
  (void)cudaFreeAsync(p, s);
}

void register_cuda_allocator() {
  DeviceAllocator a;
  a.alloc = [](size_t bytes) { return device_alloc(bytes); };
  a.free = [](void* p) { device_free(p); };
  a.copy = [](void* dst, const void* src, size_t bytes, Device dst_dev, Device src_dev) {
    if (bytes == 0) return;
    Context& c = ctx();
    // Ordered on the compute stream after the ops that produced src; a copy that touches host memory
    // waits so the caller may read (or reuse) the host buffer when it returns.
    HT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, c.compute));
    if (dst_dev == Device::cpu || src_dev == Device::cpu) HT_CUDA_CHECK(cudaStreamSynchronize(c.compute));
  };
  a.zero = [](void* dst, size_t bytes) {
    if (bytes == 0) return;
    HT_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, ctx().compute));
  };
  register_allocator(Device::cuda, std::move(a));
}

#endif

}  // namespace ht::cuda
