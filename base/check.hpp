#pragma once
// The common half of the check macros. Each library's macro lives with the layer that wraps it
// (HT_MPI_CHECK in mpi/check.hpp, HT_H5_CHECK in io/h5_check.hpp, HT_CUDA_CHECK and the cuDNN,
// cuBLAS and NCCL macros in cuda/check.hpp); all of them report through check_failed, so every
// failure message has the same form and names rank, host and file:line.
#include <string>

#include "base/error.hpp"

namespace ht {

/// "rank R on HOST" for messages; "rank ? on HOST" until set_message_rank is called (mpi/dist does
/// at start-up, so the base needs no MPI).
std::string rank_host_tag();
/// Records this process's rank for rank_host_tag (-1: unknown).
void set_message_rank(int rank);

/// Builds "LIB error at FILE:LINE (rank R on HOST): CALL failed: DETAIL" and throws RuntimeError.
[[noreturn]] void check_failed(const char* lib, const char* file, int line, const char* call,
                               const std::string& detail);

}  // namespace ht
