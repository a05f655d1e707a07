#include "mpi/check.hpp"

namespace ht {

std::string mpi_error_text(int code) {
  char buf[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return "MPI error code " + std::to_string(code);
  return std::string(buf, static_cast<size_t>(len));
}

}  // namespace ht
