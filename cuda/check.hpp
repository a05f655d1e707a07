#pragma once
// One family of check macros for every library we call: CUDA, cuDNN, cuBLAS, NCCL, MPI and HDF5.
// Each failure message names rank, host and file:line, then throws ht::RuntimeError; the CLI turns
// an uncaught error into MPI_Abort so no rank is left hanging (see src/cli/main.cpp).
//
// Usage: HT_MPI_CHECK(MPI_Allreduce(...)); HT_H5_CHECK(H5Fclose(f)); HT_CUDA_CHECK(cudaMalloc(...)).
// The CUDA-family macros exist only in builds with HT_HAVE_CUDA (and in .cu files).
#include <mpi.h>
#include <hdf5.h>

#include <string>

#include "src/base/error.hpp"

namespace ht {

/// "rank R on HOST" for messages; works before MPI_Init (then rank is "?").
std::string rank_host_tag();

/// Builds "LIB error at FILE:LINE (rank R on HOST): CALL failed: DETAIL" and throws RuntimeError.
[[noreturn]] void check_failed(const char* lib, const char* file, int line, const char* call,
                               const std::string& detail);

/// Text of an MPI error code (MPI_Error_string).
std::string mpi_error_text(int code);

}  // namespace ht

#define HT_MPI_CHECK(call)                                                            \
  do {                                                                                \
    int ht_rc_ = (call);                                                              \
    if (ht_rc_ != MPI_SUCCESS)                                                        \
      ::ht::check_failed("MPI", __FILE__, __LINE__, #call, ::ht::mpi_error_text(ht_rc_)); \
  } while (0)

// HDF5 C API calls return a negative value (herr_t or hid_t) on failure.
#define HT_H5_CHECK(call)                                                             \
  ([&]() {                                                                            \
    auto ht_rc_ = (call);                                                             \
    if (ht_rc_ < 0) ::ht::check_failed("HDF5", __FILE__, __LINE__, #call, "returned a negative status"); \
    return ht_rc_;                                                                    \
  }())

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
