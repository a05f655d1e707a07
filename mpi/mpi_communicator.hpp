#pragma once
// MpiCommunicator: the Communicator over MPI (Open MPI), float32 data.
//
// Blocking operations run on the calling thread over one duplicate of the base communicator.
// start_allreduce_average hands the span to a dedicated communication thread that owns a second
// duplicate (MPI_Comm_dup), so its collectives never interleave with the caller's: the thread takes
// started operations from a queue in order and runs MPI_Allreduce(MPI_IN_PLACE, SUM) and then divides
// by world_size (times the loss scale, set_average_unscale), while the caller goes on computing (MPI is initialised with MPI_THREAD_MULTIPLE in
// mpi/dist.cpp). With world_size 1 every operation is the identity and nothing is queued.
//
// dist.grad_dtype = bf16 (set_wire_dtype): the thread narrows the span to bfloat16, sums it with a
// user MPI_Op over MPI_UINT16_T (float32 sum of each pair, rounded once) and widens it back.
//
// Device::cpu: spans are host memory. Device::cuda (two ranks sharing a GPU, dist.allow_shared_gpu):
// spans are device memory, staged through host buffers with the registered device allocator's copy
// (device -> host when an operation starts, host -> device in wait_all / at the end of a blocking call).
//
// Errors: every MPI call is checked; an error in the communication thread is stored and rethrown by
// the next wait_all (and start call) on the caller's thread as RuntimeError naming rank, operation and
// element count. With timeout_s > 0, wait_all throws RuntimeError when the started operations have not
// completed after timeout_s seconds (a peer rank failed or stalled); the CLI then ends the job with
// MPI_Abort. Every wait on peers (blocking operations, the thread's allreduce, the set-up's
// MPI_Comm_dup) is also a CollectiveWait (mpi/collective_guard.hpp): where the guard runs (hpctrain),
// a lost peer ends the rank after dist.timeout_s whatever MPI does.
#include <mpi.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "mpi/communicator.hpp"

namespace ht {

/// Broadcast of host bytes from `root` over `comm` (its size first, then the bytes in pieces of at
/// most 1 GiB, since MPI counts are int): every rank's `bytes` ends up equal to root's. Collective
/// over `comm`. Throws RuntimeError on MPI failure. Shared by MpiCommunicator and NCCL's bootstrap.
void mpi_broadcast_bytes(std::vector<char>& bytes, int root, MPI_Comm comm);

class MpiCommunicator final : public Communicator {
 public:
  /// Collective over `base` (every rank constructs it together: it calls MPI_Comm_dup twice).
  /// `timeout_s` <= 0 means no limit on wait_all. Throws RuntimeError on MPI failure.
  explicit MpiCommunicator(MPI_Comm base = MPI_COMM_WORLD, Device device = Device::cpu, double timeout_s = 0);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  std::string name() const override { return "mpi"; }
  Device device() const override { return device_; }
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }

  void allreduce_sum(std::span<float> data) override;
  void allreduce_average(std::span<float> data) override;
  void broadcast(std::span<float> data, int root) override;
  void reduce_sum(std::span<float> data, int root) override;      // MPI_Reduce(MPI_SUM)
  void broadcast_bytes(std::vector<char>& bytes, int root) override;  // mpi_broadcast_bytes

  /// Queues an in-place average for the communication thread and returns at once (after the
  /// device-to-host copy when staging). `data` must not be touched until wait_all returns, and must
  /// outlive the communicator when wait_all threw (the operation may still be inside MPI).
  void start_allreduce_average(std::span<float> data) override;
  /// Blocks until every started average has completed; returns the milliseconds blocked. Throws
  /// RuntimeError on a failed operation or on timeout (see above).
  double wait_all() override;
  void set_async_observer(AsyncObserver obs) override;  // called on the communication thread
  /// f32 or bf16 (an MPI_UINT16_T allreduce with a user operation: see WireDType).
  void set_wire_dtype(WireDType w) override;
  /// Applied (fused with the division by world_size on the communication thread): returns true.
  bool set_average_unscale(float scale) override;

  /// Test hook: the background operation `nth` started from now on (0 = the next one) fails inside
  /// the communication thread as if MPI had returned an error, so tests can check error propagation.
  void inject_failure_for_test(int64_t nth);

  struct Shared;  // state shared with the communication thread (defined in the .cpp)

 private:
  void ensure_thread();
  void check_root(const char* op, int root) const;  ///< RuntimeError for a root outside [0, world_size)
  std::span<float> stage_in(std::span<float> data, size_t slot);
  void stage_out(std::span<float> host, std::span<float> data);
  /// A blocking operation on the caller's thread: exchange(host) under a CollectiveWait named `what`,
  /// on `data` itself (Device::cpu) or a host copy that is copied back when `copy_back`. Nothing on
  /// one rank.
  template <class Exchange>
  void blocking(std::span<float> data, const char* what, Exchange&& exchange, bool copy_back = true);

  Device device_;
  double timeout_s_;
  WireDType wire_ = WireDType::f32;  ///< of the averages started from now on
  float unscale_ = 1;                ///< ditto: the sum is divided by world_size x unscale_
  int rank_ = 0, world_ = 1;
  MPI_Comm main_comm_ = MPI_COMM_NULL;  ///< blocking operations (caller's thread)
  std::shared_ptr<Shared> s_;           ///< queue, results and the thread's own communicator
  // Staging (Device::cuda): host buffers per started operation and where their results go back.
  std::vector<std::vector<float>> staging_;
  std::vector<std::pair<std::span<float>, std::span<float>>> pending_copy_back_;  ///< (host, device)
  std::vector<float> blocking_stage_;
};

}  // namespace ht
