// bind_rank_gpu (mpi/gpu/gpu_binding.hpp) under mpirun against the fake driver library (HT_LIBCUDA):
// ranks on one node bind different GPUs; one GPU for two ranks is an error on every rank naming both
// ranks and the GPU, unless sharing is allowed; no driver is a usage error on every rank. Nodes are
// the shared-memory communicator (here: both ranks on this machine, or each alone through
// MPI_Comm_split, standing for two nodes), not the host names, which only appear in messages.
#include <catch2/catch.hpp>
#include <mpi.h>
#include <stdlib.h>

#include "mpi/gpu/gpu_binding.hpp"
#include "base/error.hpp"

using namespace ht;

TEST_CASE("bind_rank_gpu with the fake driver", "[binding_mpi]") {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  REQUIRE(size == 2);
  MPI_Comm node = MPI_COMM_NULL, alone = MPI_COMM_NULL;  // one node for both; one node per rank
  REQUIRE(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node) == MPI_SUCCESS);
  int node_size = 0;
  MPI_Comm_size(node, &node_size);
  REQUIRE(node_size == 2);  // mpirun -np 2 on one machine
  REQUIRE(MPI_Comm_split(MPI_COMM_WORLD, rank, 0, &alone) == MPI_SUCCESS);
  setenv("HT_LIBCUDA", HT_FAKE_DRIVER, 1);
  unsetenv("CUDA_VISIBLE_DEVICES");

  setenv("HT_FAKE_CUDA_DEVICES", "2", 1);
  std::string uuid;
  CHECK(bind_rank_gpu(MPI_COMM_WORLD, node, "node1", false, &uuid) == rank);
  CHECK(uuid == (rank == 0 ? "GPU-a0a0a0a0-a0a0-a0a0-a0a0-a0a0a0a0a0a0" : "GPU-a1a1a1a1-a1a1-a1a1-a1a1-a1a1a1a1a1a1"));
  // Two names for one node (an alias, a short and a fully qualified name): still one node, so the
  // ranks take GPUs 0 and 1 (grouped by host name, each would have taken GPU 0).
  CHECK(bind_rank_gpu(MPI_COMM_WORLD, node, rank == 0 ? "node1" : "node1.cluster", false) == rank);

  setenv("HT_FAKE_CUDA_DEVICES", "1", 1);
  CHECK_THROWS_WITH(bind_rank_gpu(MPI_COMM_WORLD, node, "node1", false),
                    Catch::Contains("ranks 0 and 1 on host node1") &&
                        Catch::Contains("GPU-a0a0a0a0-a0a0-a0a0-a0a0-a0a0a0a0a0a0"));
  // Host aliases do not hide the sharing: the message names the node by its first rank's host.
  CHECK_THROWS_WITH(bind_rank_gpu(MPI_COMM_WORLD, node, rank == 0 ? "node1" : "node1.cluster", false),
                    Catch::Contains("ranks 0 and 1 on host node1 "));
  CHECK(bind_rank_gpu(MPI_COMM_WORLD, node, "node1", true) == 0);
  // Different nodes: each rank alone on its node, no sharing, whatever the names (containers on
  // several machines often share one host name).
  CHECK(bind_rank_gpu(MPI_COMM_WORLD, alone, rank == 0 ? "node1" : "node2", false) == 0);
  CHECK(bind_rank_gpu(MPI_COMM_WORLD, alone, "localhost", false) == 0);

  setenv("HT_FAKE_CUDA_DEVICES", "2", 1);
  setenv("HT_LIBCUDA", "libht_no_such_driver.so.1", 1);
  CHECK_THROWS_AS(bind_rank_gpu(MPI_COMM_WORLD, node, "node1", false), UsageError);
  CHECK_THROWS_WITH(bind_rank_gpu(MPI_COMM_WORLD, node, "node1", false),
                    Catch::Contains("rank 0 on node1: no NVIDIA driver"));
  unsetenv("HT_LIBCUDA");
  unsetenv("HT_FAKE_CUDA_DEVICES");
  MPI_Comm_free(&alone);
  MPI_Comm_free(&node);
}
