#pragma once
// The binding step of a GPU run over MPI: gathers every rank's node, host and visible GPUs and applies
// the plan of cuda/binding_plan.hpp. Part of mpi/gpu, the bridge between the MPI and CUDA layers.
#include <mpi.h>

#include <string>

namespace ht {

/// The binding step of a GPU run, collective over `comm`: probes this rank's GPUs (cuda/gpu_env.hpp),
/// gathers every rank's host and visible UUIDs, plans the binding and returns this rank's device
/// ordinal (its UUID in *uuid when non-null). Every rank reaches the same verdict: throws UsageError
/// (exit 2) on every rank when any rank has no usable GPU, naming the rank, host and the reason (no
/// device, driver missing, driver older than the runtime, CUDA_VISIBLE_DEVICES empty) with its fix,
/// and when two ranks would share a GPU unless allow_shared_gpu. `host` is this rank's
/// host name (DistContext::host), used in messages only. Ranks are grouped into nodes by `local`, this
/// rank's shared-memory communicator (DistContext::local, from MPI_Comm_split_type
/// MPI_COMM_TYPE_SHARED): the ranks that share memory share the node's GPUs, whatever their host
/// names say (aliases of one node, or one name on several nodes, as in containers). Its members must
/// be members of `comm`.
int bind_rank_gpu(MPI_Comm comm, MPI_Comm local, const std::string& host, bool allow_shared_gpu,
                  std::string* uuid = nullptr);

/// bind_rank_gpu over the whole job: MPI_COMM_WORLD, with dist()'s node communicator and host name
/// (for src/train, which calls no MPI itself).
int bind_job_rank_gpu(bool allow_shared_gpu);

}  // namespace ht
