#pragma once
// This process's rank and the world size in MPI_COMM_WORLD, for the multi-rank Catch2 tests.
#include <mpi.h>

namespace ht::test {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

inline int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

}  // namespace ht::test
