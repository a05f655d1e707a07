#pragma once
// Check macros of the CUDA libraries: HT_CUDA_CHECK, HT_CUDNN_CHECK, HT_CUBLAS_CHECK, HT_NCCL_CHECK.
// Each failure message names rank, host and file:line, then throws ht::RuntimeError (the common
// format is src/base/check.hpp); the CLI turns an uncaught error into MPI_Abort so no rank is left
// hanging. The macros exist only in builds with HT_HAVE_CUDA (and in .cu files).
// Usage: HT_CUDA_CHECK(cudaMalloc(...)).
#include "src/base/check.hpp"

#if defined(HT_HAVE_CUDA)
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>

#define HT_CUDA_CHECK(call)                                                                   \
  do {                                                                                        \
    cudaError_t ht_rc_ = (call);                                                              \
    if (ht_rc_ != cudaSuccess)                                                                \
      ::ht::check_failed("CUDA", __FILE__, __LINE__, #call,                                   \
                         std::string(cudaGetErrorName(ht_rc_)) + ": " + cudaGetErrorString(ht_rc_)); \
  } while (0)

#define HT_CUDNN_CHECK(call)                                                                  \
  do {                                                                                        \
    cudnnStatus_t ht_rc_ = (call);                                                            \
    if (ht_rc_ != CUDNN_STATUS_SUCCESS)                                                       \
      ::ht::check_failed("cuDNN", __FILE__, __LINE__, #call, cudnnGetErrorString(ht_rc_));    \
  } while (0)

#define HT_CUBLAS_CHECK(call)                                                                 \
  do {                                                                                        \
    cublasStatus_t ht_rc_ = (call);                                                           \
    if (ht_rc_ != CUBLAS_STATUS_SUCCESS)                                                      \
      ::ht::check_failed("cuBLAS", __FILE__, __LINE__, #call, cublasGetStatusString(ht_rc_)); \
  } while (0)

#define HT_NCCL_CHECK(call)                                                                   \
  do {                                                                                        \
    ncclResult_t ht_rc_ = (call);                                                             \
    if (ht_rc_ != ncclSuccess && ht_rc_ != ncclInProgress)                                    \
      ::ht::check_failed("NCCL", __FILE__, __LINE__, #call, ncclGetErrorString(ht_rc_));      \
  } while (0)
#endif
