// Per-rank CUDA context (see cuda_context.hpp). Host code only, compiled in every build; the CUDA
// part is guarded by HT_HAVE_CUDA.
#include "cuda/cuda_context.hpp"

#include <mutex>

#include "base/error.hpp"

#if defined(HT_HAVE_CUDA)
#include "cuda/allocator.hpp"
#include "cuda/check.hpp"
#include "cuda/lib_versions.hpp"
#endif

namespace ht::cuda {

namespace {
std::mutex g_opt_mu;
Options g_options;
}  // namespace

void set_options(const Options& o) {
  std::lock_guard<std::mutex> lk(g_opt_mu);
  g_options = o;
}

Options options() {
  std::lock_guard<std::mutex> lk(g_opt_mu);
  return g_options;
}

#if !defined(HT_HAVE_CUDA)

bool built_with_cuda() { return false; }
void init(int) {
  throw RuntimeError("CUDA: this hpctrain was built without the CUDA backend (nvcc was not found at build time, or "
                     "-DHT_ENABLE_CUDA=OFF); use --train.device cpu or rebuild with CUDA");
}
bool initialized() { return false; }
int device() { throw RuntimeError("CUDA: this hpctrain was built without the CUDA backend"); }
void synchronize() {}
std::string device_description() { return ""; }

#else

namespace {
std::mutex g_mu;
Context g_ctx;
bool g_init = false;
}  // namespace

bool built_with_cuda() { return true; }

void init(int dev) {
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_init) {
    if (dev != g_ctx.device)
      throw RuntimeError("CUDA: context already bound to device " + std::to_string(g_ctx.device) +
                         ", cannot rebind to device " + std::to_string(dev));
    HT_CUDA_CHECK(cudaSetDevice(dev));
    return;
  }
  int count = 0;
  cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess)
    throw RuntimeError(std::string("CUDA: cannot use the GPU: cudaGetDeviceCount failed: ") + cudaGetErrorName(rc) +
                       ": " + cudaGetErrorString(rc) + " (run 'hpctrain doctor')");
  if (dev < 0 || dev >= count)
    throw RuntimeError("CUDA: device " + std::to_string(dev) + " requested but " + std::to_string(count) +
                       " device(s) are visible (CUDA_VISIBLE_DEVICES)");
  // A cuDNN or NCCL built for another CUDA major version loads under the same soname and fails
  // later, far from the cause: refuse it here, naming both versions (cuda/lib_versions.hpp).
  check_library_cuda_versions();
  Context c;
  c.device = dev;
  HT_CUDA_CHECK(cudaSetDevice(dev));
  HT_CUDA_CHECK(cudaGetDeviceProperties(&c.prop, dev));
  HT_CUDA_CHECK(cudaStreamCreateWithFlags(&c.compute, cudaStreamNonBlocking));
  HT_CUDA_CHECK(cudaStreamCreateWithFlags(&c.copy, cudaStreamNonBlocking));
  HT_CUDNN_CHECK(cudnnCreate(&c.cudnn));
  HT_CUDNN_CHECK(cudnnSetStream(c.cudnn, c.compute));
  HT_CUBLAS_CHECK(cublasCreate(&c.cublas));
  HT_CUBLAS_CHECK(cublasSetStream(c.cublas, c.compute));
  // Pointer mode host: alpha/beta are host scalars in every call.
  HT_CUBLAS_CHECK(cublasSetPointerMode(c.cublas, CUBLAS_POINTER_MODE_HOST));
  // Keep freed blocks in the pool (no release to the driver at each synchronisation): the step's
  // temporaries are reused step after step without cudaMalloc.
  cudaMemPool_t pool;
  HT_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, dev));
  uint64_t threshold = UINT64_MAX;
  HT_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  register_cuda_allocator();
  // Initialised only once everything above succeeded: a failure leaves init() to be retried (and
  // failing again with the same message) rather than a half-built context reported as ready.
  g_ctx = c;
  g_init = true;
}

bool initialized() {
  std::lock_guard<std::mutex> lk(g_mu);
  return g_init;
}

Context& ctx() {
  if (!g_init) throw RuntimeError("CUDA: the CUDA context is not initialised (ht::cuda::init was not called)");
  int cur = -1;
  if (cudaGetDevice(&cur) != cudaSuccess || cur != g_ctx.device) HT_CUDA_CHECK(cudaSetDevice(g_ctx.device));
  return g_ctx;
}

int device() { return ctx().device; }

void synchronize() {
  if (!g_init) return;
  Context& c = ctx();
  HT_CUDA_CHECK(cudaStreamSynchronize(c.copy));
  HT_CUDA_CHECK(cudaStreamSynchronize(c.compute));
}

std::string device_description() {
  if (!g_init) return "";
  return std::string(g_ctx.prop.name) + " (sm_" + std::to_string(g_ctx.prop.major) +
         std::to_string(g_ctx.prop.minor) + ")";
}

namespace {
void* g_ws = nullptr;
size_t g_ws_bytes = 0;
}  // namespace

void* workspace(size_t bytes) {
  if (bytes == 0) return nullptr;
  if (bytes > g_ws_bytes) {
    if (g_ws) device_free(g_ws);  // stream-ordered: work already issued still sees the old block
    g_ws = nullptr;
    g_ws_bytes = 0;
    g_ws = device_alloc(bytes);
    g_ws_bytes = bytes;
  }
  return g_ws;
}

#endif

}  // namespace ht::cuda
