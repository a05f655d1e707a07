// Catch2 main for the GPU tests (ctest label gpu). Without a usable GPU it prints why and exits 77,
// which ctest reports as skipped (SKIP_RETURN_CODE). Otherwise it initialises MPI (the NCCL test
// broadcasts its unique id over MPI_COMM_WORLD, a one-rank world here) and binds device 0.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cuda_runtime.h>
#include <mpi.h>

#include <cstdio>
#include <cstring>

#include "cuda/cuda_context.hpp"

int main(int argc, char** argv) {
  // Listing the test cases (--list-tests, --list-test-names-only, ...) needs no GPU: the check that
  // every case belongs to exactly one ctest area (tests/gpu/check_gpu_areas.py) runs on any machine.
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--list", 6) == 0) return Catch::Session().run(argc, argv);
  int count = 0;
  cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess || count == 0) {
    std::printf("SKIPPED: no usable GPU (%s)\n",
                rc != cudaSuccess ? cudaGetErrorString(rc) : "cudaGetDeviceCount reports 0 devices");
    return 77;
  }
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  ht::cuda::init(0);
  std::printf("GPU tests on %s\n", ht::cuda::device_description().c_str());
  Catch::Session session;
  const int result = session.run(argc, argv);
  ht::cuda::synchronize();
  MPI_Finalize();
  return result;
}
