#pragma once
// Communicators: collective operations over all ranks on float32 data that lives on the
// communicator's device. MpiCommunicator (mpi/mpi_communicator.cpp) works on host memory;
// NcclCommunicator (mpi/gpu/nccl_communicator.cu, CUDA builds) on device memory, where "async" means
// enqueued on a dedicated communication stream ordered after the compute stream's work so far.
//
// Element counts are the span's size (floats), never bytes (broadcast_bytes alone moves host bytes).
#include <chrono>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "base/tensor.hpp"

namespace ht {

/// The element type gradient averages travel in (dist.grad_dtype). bf16 halves the bytes: each
/// rank's float32 values are rounded to bfloat16 (nearest even), every partial sum is formed in
/// float32 and rounded once to bfloat16, and the result is widened back to float32.
enum class WireDType { f32, bf16 };
/// Bytes per element on the wire: 4 or 2.
inline int wire_bytes(WireDType w) { return w == WireDType::bf16 ? 2 : 4; }
/// "fp32" or "bf16" (the dist.grad_dtype spelling).
inline const char* wire_name(WireDType w) { return w == WireDType::bf16 ? "bf16" : "fp32"; }

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
  /// The wire type of the averages started from now on (start_allreduce_average). The base supports
  /// f32 only and throws UsageError naming dist.grad_dtype and the communicator for anything else.
  virtual void set_wire_dtype(WireDType w) {
    if (w != WireDType::f32)
      throw UsageError(std::string("dist.grad_dtype = ") + wire_name(w) + ": the " + name() +
                       " communicator of this build sends gradients in fp32 only");
  }
  /// Loss scaling's unscale fused with the average: the averages started from now on divide the
  /// sum by world_size x `scale` (a power of two: exact) instead of world_size. Returns true when
  /// this communicator applies it; false (the base, for any scale but 1) leaves the caller to divide.
  virtual bool set_average_unscale(float scale) { return scale == 1.0f; }
  /// Waits until every started operation has completed (GPU: the compute stream waits on them).
  /// Returns the milliseconds the caller was blocked.
  virtual double wait_all() = 0;

  // ---- timeline tracing (doctor/trace; mpi/trace.hpp) ----
  /// Called on the communication thread after each background operation (start_allreduce_average)
  /// with its sequence number since the communicator was made and its start and end times.
  using AsyncObserver = std::function<void(int64_t seq, std::chrono::steady_clock::time_point begin,
                                           std::chrono::steady_clock::time_point end)>;
  /// Sets the observer (before the first start_allreduce_average). Default: ignored (NCCL's timing
  /// shows in Nsight through NVTX instead).
  virtual void set_async_observer(AsyncObserver) {}
};


}  // namespace ht
