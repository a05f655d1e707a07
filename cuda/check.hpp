#pragma once
// Check macros of the CUDA libraries: HT_CUDA_CHECK, HT_CUDNN_CHECK, HT_CUBLAS_CHECK, HT_NCCL_CHECK.
// Each failure message names rank, host and file:line, then throws ht::RuntimeError (the common
// format is base/check.hpp); the CLI turns an uncaught error into MPI_Abort so no rank is left
// hanging. The macros exist only in builds with HT_HAVE_CUDA (and in .cu files).
// Usage: HT_CUDA_CHECK(cudaMalloc(...)).
#include "base/check.hpp"

#if defined(HT_HAVE_CUDA)
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>

/// One check for every library above: evaluates `call` once into `ht_rc_` (of type `rc_type`); when
/// `ok` (an expression of ht_rc_) is false, reports `lib`, the call's text and `text` (an expression of
/// ht_rc_ giving the library's error string) through ::ht::check_failed, which throws.
#define HT_LIB_CHECK_(lib, rc_type, call, call_text, ok, text)                  \
  do {                                                                          \
    rc_type ht_rc_ = (call);                                                    \
    if (!(ok)) ::ht::check_failed(lib, __FILE__, __LINE__, call_text, (text));  \
  } while (0)

#define HT_CUDA_CHECK(call)                                                 \
  HT_LIB_CHECK_("CUDA", cudaError_t, call, #call, ht_rc_ == cudaSuccess,    \
                std::string(cudaGetErrorName(ht_rc_)) + ": " + cudaGetErrorString(ht_rc_))
#define HT_CUDNN_CHECK(call) \
  HT_LIB_CHECK_("cuDNN", cudnnStatus_t, call, #call, ht_rc_ == CUDNN_STATUS_SUCCESS, cudnnGetErrorString(ht_rc_))
#define HT_CUBLAS_CHECK(call) \
  HT_LIB_CHECK_("cuBLAS", cublasStatus_t, call, #call, ht_rc_ == CUBLAS_STATUS_SUCCESS, cublasGetStatusString(ht_rc_))
#define HT_NCCL_CHECK(call)                                 \
  HT_LIB_CHECK_("NCCL", ncclResult_t, call, #call,          \
                ht_rc_ == ncclSuccess || ht_rc_ == ncclInProgress, ncclGetErrorString(ht_rc_))
#endif
