#pragma once
// HT_MPI_CHECK(MPI_Allreduce(...)): throws ht::RuntimeError naming rank, host, file:line, the call
// and MPI's own error text (base/check.hpp has the common message format).
#include <mpi.h>

#include <string>

#include "base/check.hpp"

namespace ht {

/// Text of an MPI error code (MPI_Error_string).
std::string mpi_error_text(int code);

}  // namespace ht

#define HT_MPI_CHECK(call)                                                            \
  do {                                                                                \
    int ht_rc_ = (call);                                                              \
    if (ht_rc_ != MPI_SUCCESS)                                                        \
      ::ht::check_failed("MPI", __FILE__, __LINE__, #call, ::ht::mpi_error_text(ht_rc_)); \
  } while (0)
