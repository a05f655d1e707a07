#pragma once
// The communicator for a run's device: MPI on the CPU (and on a GPU shared by two ranks, staged
// through host memory), NCCL on a GPU. Lives in mpi/gpu because it chooses between the two.
#include <memory>

#include "mpi/communicator.hpp"

namespace ht {

/// Makes the communicator for a device: MPI on CPU, NCCL on CUDA (unless allow_mpi_on_gpu, used
/// when two ranks share a GPU). Throws RuntimeError when the device has no communicator in this build.
std::unique_ptr<Communicator> make_communicator(Device device, bool allow_mpi_on_gpu, double timeout_s);

}  // namespace ht
