#pragma once
// Factory for the NCCL communicator (mpi/gpu/nccl_communicator.cu, CUDA builds only). Declared here so
// make_communicator (mpi/gpu/communicator_factory.cpp) can call it without including CUDA headers.
#include <memory>

#include "mpi/communicator.hpp"

namespace ht {

#if defined(HT_HAVE_CUDA)
/// Creates the NCCL communicator over all ranks of MPI_COMM_WORLD (device() == Device::cuda). The
/// calling thread's current CUDA device must already be this rank's GPU (device binding happens
/// first). Rank 0 makes the ncclUniqueId and broadcasts it over MPI; collective: every rank calls it.
/// `timeout_s` (> 0; 0 = no limit) bounds initialisation and every collective: on expiry the
/// communicator is aborted (ncclCommAbort) and RuntimeError names the rank, the operation, the NCCL_*
/// settings in effect and suggests rerunning with NCCL_DEBUG=INFO.
/// Data spans passed to its operations are device pointers (float32 element counts).
/// `grad_dtype` (dist.grad_dtype) is the dtype of start_allreduce_average on the wire: f32, or bf16
/// (rounded to nearest even, averaged in bfloat16, widened back: half the bytes); any other throws
/// RuntimeError. The blocking collectives are float32 whatever it is.
std::unique_ptr<Communicator> make_nccl_communicator(double timeout_s, DType grad_dtype = DType::f32);

/// Test hook (tests/gpu/test_gpu_nccl.cpp): a communicator of `nranks` ranks in which this process is
/// `rank`, made from a fresh unique id that no other process knows, without MPI. With nranks > 1 the
/// peers never arrive, so initialisation must end after `timeout_s` with the timeout RuntimeError
/// (ncclCommAbort, rank, operation, NCCL_* settings, NCCL_DEBUG=INFO hint): the single-GPU check of
/// the time limit. With nranks == 1 it is an ordinary one-rank communicator.
std::unique_ptr<Communicator> make_nccl_communicator_unjoined_for_test(int nranks, int rank, double timeout_s,
                                                                      DType grad_dtype = DType::f32);
#endif

}  // namespace ht
