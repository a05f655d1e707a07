#pragma once
// The per-rank CUDA context: the bound device, a compute stream (every op runs on it), a copy stream
// (host-to-device batch copies), and the cuDNN and cuBLAS handles bound to the compute stream, plus
// the process-wide options the ops read (cuDNN workspace cap, deterministic algorithms, TF32).
//
// The first part of this header has no CUDA types, so the trainer and CLI can call it in every
// build; in a CPU-only build init() throws RuntimeError. The second part (HT_HAVE_CUDA) exposes the
// streams and handles to the CUDA implementations in cuda/ and mpi/gpu/nccl_communicator.cu.
#include <cstddef>
#include <string>

namespace ht::cuda {

/// Options read by the CUDA ops. Set them before the first op (the convolution algorithm cache is
/// filled once per shape with the options in effect then).
struct Options {
  size_t workspace_bytes = size_t{256} << 20;  ///< cuDNN convolution workspace cap (config cuda.workspace_mb)
  bool deterministic = false;                  ///< only deterministic cuDNN algorithms (train.deterministic)
  bool allow_tf32 = false;                     ///< TF32 tensor cores for fp32 conv/GEMM (train.precision = tf32)
};
void set_options(const Options& o);
Options options();

/// True when this hpctrain was built with the CUDA backend.
bool built_with_cuda();

/// Binds `device` (an ordinal among the visible devices) to this process, creates the streams and the
/// cuDNN/cuBLAS handles and registers the CUDA tensor allocator (cuda/allocator.hpp). Idempotent for
/// the same device; a different device after initialisation throws RuntimeError. Throws RuntimeError
/// (CPU-only build, no such device, driver or library failure, a cuDNN or NCCL built for another CUDA
/// major version than this binary: cuda/lib_versions.hpp).
void init(int device);
/// True after init().
bool initialized();
/// The bound device ordinal; throws RuntimeError before init().
int device();
/// Waits for all work on the compute and copy streams (cudaStreamSynchronize); no-op before init().
void synchronize();
/// Name and compute capability of the bound device, e.g. "NVIDIA H200 (sm_90)"; "" before init().
std::string device_description();

}  // namespace ht::cuda

#if defined(HT_HAVE_CUDA)
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

namespace ht::cuda {

struct Context {
  int device = -1;
  cudaStream_t compute = nullptr;  ///< all ops; the cuDNN and cuBLAS handles are bound to it
  cudaStream_t copy = nullptr;     ///< host-to-device input copies, ordered before compute by events
  cudnnHandle_t cudnn = nullptr;
  cublasHandle_t cublas = nullptr;
  cudaDeviceProp prop{};
};

/// The context; throws RuntimeError before init(). Also makes `device` current on the calling
/// thread (the CUDA current device is per thread), so background threads may call ops too.
Context& ctx();

/// Scratch memory on the compute stream shared by all ops (cuDNN workspaces): valid until the next
/// call. Grows as needed (the old block is freed stream-ordered); bytes == 0 returns nullptr.
void* workspace(size_t bytes);

}  // namespace ht::cuda
#endif
