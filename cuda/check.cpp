// Host-only part of the check macros (compiled in every build, CUDA or not).
#include "cuda/check.hpp"

#include <unistd.h>

#include <sstream>

namespace ht {

std::string rank_host_tag() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  std::ostringstream os;
  if (inited && !finalized) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    os << "rank " << rank << " on " << host;
  } else {
    os << "rank ? on " << host;
  }
  return os.str();
}

void check_failed(const char* lib, const char* file, int line, const char* call, const std::string& detail) {
  std::ostringstream os;
  os << lib << " error at " << file << ":" << line << " (" << rank_host_tag() << "): " << call
     << " failed: " << detail;
  throw RuntimeError(os.str());
}

std::string mpi_error_text(int code) {
  char buf[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return "MPI error code " + std::to_string(code);
  return std::string(buf, static_cast<size_t>(len));
}

}  // namespace ht
