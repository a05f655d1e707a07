// Catch2 main for multi-rank tests: MPI is initialised once around the whole session, and a failing
// rank makes the process exit non-zero so mpirun reports it.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <mpi.h>

#include "base/check.hpp"

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  ht::set_message_rank(rank);
  Catch::Session session;
  int rc = session.run(argc, argv);
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
