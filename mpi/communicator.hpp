#pragma once
// Communicators: collective operations over all ranks on float32 data that lives on the
// communicator's device. MpiCommunicator (mpi/mpi_communicator.cpp) works on host memory;
// NcclCommunicator (mpi/nccl_communicator.cu, CUDA builds) on device memory, where "async" means
// enqueued on a dedicated communication stream ordered after the compute stream's work so far.
//
// Element counts are the span's size (floats), never bytes (broadcast_bytes alone moves host bytes).
#include <chrono>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "src/base/tensor.hpp"

namespace ht {

class Communicator {
 public:
  virtual ~Communicator() = default;
  /// "mpi" or "nccl".
  virtual std::string name() const = 0;
  virtual Device device() const = 0;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  /// Blocking in-place sum over ranks.
  virtual void allreduce_sum(std::span<float> data) = 0;
  /// Blocking in-place average over ranks (sum / world_size).
  virtual void allreduce_average(std::span<float> data) = 0;
  /// Blocking broadcast from `root` into every rank's `data`.
  virtual void broadcast(std::span<float> data, int root) = 0;
  /// Blocking sum over ranks into `root`'s `data`; on the other ranks `data` is input only (its
  /// content afterwards is unspecified). Throws RuntimeError for a root outside [0, world_size).
  virtual void reduce_sum(std::span<float> data, int root) = 0;
  /// Blocking broadcast of host bytes (any size, any communicator device: NCCL sends them over its
  /// MPI bootstrap communicator): afterwards every rank's `bytes` equals `root`'s, resized to its
  /// length. Used for the serialised training state (src/train/training_state.hpp). Throws
  /// RuntimeError for a root outside [0, world_size) or on a failed transfer.
  virtual void broadcast_bytes(std::vector<char>& bytes, int root) = 0;

  /// Starts an in-place average of `data` that overlaps with what the caller does next (the rest of
  /// backward). On the GPU it is ordered after all work already issued on the compute stream.
  /// Calls are completed in the order they were started.
  virtual void start_allreduce_average(std::span<float> data) = 0;
  /// Waits until every started operation has completed (GPU: the compute stream waits on them).
  /// Returns the milliseconds the caller was blocked.
  virtual double wait_all() = 0;

  // ---- timeline tracing (doctor/trace; io/trace.hpp) ----
  /// Called on the communication thread after each background operation (start_allreduce_average)
  /// with its sequence number since the communicator was made and its start and end times.
  using AsyncObserver = std::function<void(int64_t seq, std::chrono::steady_clock::time_point begin,
                                           std::chrono::steady_clock::time_point end)>;
  /// Sets the observer (before the first start_allreduce_average). Default: ignored (NCCL's timing
  /// shows in Nsight through NVTX instead).
  virtual void set_async_observer(AsyncObserver) {}
};


}  // namespace ht
