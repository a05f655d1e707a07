// bind_rank_gpu (cuda/binding.hpp) under mpirun against the fake driver library (HT_LIBCUDA): ranks on
// one host bind different GPUs; one GPU for two ranks is an error on every rank naming both ranks and
// the GPU, unless sharing is allowed; no driver is a usage error on every rank.
#include <catch2/catch.hpp>
#include <mpi.h>
#include <stdlib.h>

#include "mpi/gpu/gpu_binding.hpp"
#include "src/base/error.hpp"

using namespace ht;

TEST_CASE("bind_rank_gpu with the fake driver", "[binding_mpi]") {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  REQUIRE(size == 2);
  setenv("HT_LIBCUDA", HT_FAKE_DRIVER, 1);
  unsetenv("CUDA_VISIBLE_DEVICES");

  setenv("HT_FAKE_CUDA_DEVICES", "2", 1);
  std::string uuid;
  CHECK(bind_rank_gpu(MPI_COMM_WORLD, "node1", false, &uuid) == rank);
  CHECK(uuid == (rank == 0 ? "GPU-a0a0a0a0-a0a0-a0a0-a0a0-a0a0a0a0a0a0" : "GPU-a1a1a1a1-a1a1-a1a1-a1a1-a1a1a1a1a1a1"));

  setenv("HT_FAKE_CUDA_DEVICES", "1", 1);
  CHECK_THROWS_WITH(bind_rank_gpu(MPI_COMM_WORLD, "node1", false),
                    Catch::Contains("ranks 0 and 1 on host node1") &&
                        Catch::Contains("GPU-a0a0a0a0-a0a0-a0a0-a0a0-a0a0a0a0a0a0"));
  CHECK(bind_rank_gpu(MPI_COMM_WORLD, "node1", true) == 0);
  // Different hosts: each rank alone on its host, no sharing.
  CHECK(bind_rank_gpu(MPI_COMM_WORLD, rank == 0 ? "node1" : "node2", false) == 0);

  setenv("HT_FAKE_CUDA_DEVICES", "2", 1);
  setenv("HT_LIBCUDA", "libht_no_such_driver.so.1", 1);
  CHECK_THROWS_AS(bind_rank_gpu(MPI_COMM_WORLD, "node1", false), UsageError);
  CHECK_THROWS_WITH(bind_rank_gpu(MPI_COMM_WORLD, "node1", false), Catch::Contains("rank 0 on node1: no NVIDIA driver"));
  unsetenv("HT_LIBCUDA");
  unsetenv("HT_FAKE_CUDA_DEVICES");
}
