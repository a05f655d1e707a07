// make_communicator: MPI on CPU (and on a shared GPU, staged through host memory), NCCL on CUDA.
#include "mpi/gpu/communicator_factory.hpp"

#include "mpi/mpi_communicator.hpp"
#include "mpi/gpu/nccl_communicator.hpp"

namespace ht {

std::unique_ptr<Communicator> make_communicator(Device device, bool allow_mpi_on_gpu, double timeout_s) {
  if (device == Device::cpu) return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, Device::cpu, timeout_s);
#if defined(HT_HAVE_CUDA)
  if (allow_mpi_on_gpu) return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, Device::cuda, timeout_s);
  return make_nccl_communicator(timeout_s);
#else
  (void)allow_mpi_on_gpu;
  throw RuntimeError("make_communicator: device cuda has no communicator in this build (built without CUDA)");
#endif
}

}  // namespace ht
