// NcclCommunicator: the Communicator over NCCL for one GPU per rank (declared through
// make_nccl_communicator in mpi/gpu/nccl_communicator.hpp).
//
// - One communicator over all ranks of MPI_COMM_WORLD; rank 0 makes the ncclUniqueId, MPI_Bcast
//   hands it to the others. Initialisation is non-blocking (ncclConfig_t.blocking = 0) and polled
//   with ncclCommGetAsyncError under the time limit, so a rank that never arrives cannot hang the rest.
// - Collectives run on a dedicated communication stream of the device's highest priority.
//   start_allreduce_average records an event
//   on the compute stream (the bucket's gradients are ready once the work issued so far is done),
//   makes the communication stream wait on it and enqueues ncclAllReduce(ncclAvg) in place, so the
//   reduction overlaps the rest of backward. wait_all records an event on the communication stream,
//   polls it under the time limit (checking ncclCommGetAsyncError between polls) and makes the
//   compute stream wait on it, so the optimizer step sees the averaged gradients.
// - Time limit: on expiry, or on an asynchronous NCCL error, ncclCommAbort and RuntimeError naming
//   the rank, the operation, the NCCL_* settings and the NCCL_DEBUG=INFO hint
//   (mpi/gpu/poll_deadline.hpp). Every later call throws, since the communicator is gone.
// - Wire dtype (dist.grad_dtype): with bf16, start_allreduce_average (the gradient buckets) rounds
//   the float32 bucket to a bfloat16 copy on the communication stream (nearest even, the rounding of
//   base/bf16.hpp), averages the copy with ncclAvg over ncclBfloat16 (half the bytes on the wire)
//   and widens the result back into the float32 bucket, all ordered on that stream. The copies are
//   kept per started operation and reused step after step (same buckets, no allocation in the
//   steady state). The blocking collectives stay float32.
// - Host bytes (broadcast_bytes) go over the MPI bootstrap communicator, a duplicate of
//   MPI_COMM_WORLD made with the communicator; reduce_sum is ncclReduce on the device.
#include <mpi.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <sstream>
#include <vector>

#include "cuda/check.hpp"
#include "mpi/whereabouts.hpp"
#include "mpi/check.hpp"
#include "mpi/collective_guard.hpp"
#include "cuda/cuda_context.hpp"
#include "mpi/gpu/poll_deadline.hpp"
#include "mpi/nccl_ras.hpp"
#include "base/bf16.hpp"
#include "mpi/mpi_communicator.hpp"  // mpi_broadcast_bytes
#include "mpi/gpu/nccl_communicator.hpp"

namespace ht {
namespace {

// The float32 <-> bfloat16 copies of the bf16 wire (one thread per element, grid-stride).
__global__ void to_bf16_kernel(const float* __restrict__ src, bf16* __restrict__ dst, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x)
    dst[i] = to_bf16(src[i]);
}
__global__ void from_bf16_kernel(const bf16* __restrict__ src, float* __restrict__ dst, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x)
    dst[i] = to_f32(src[i]);
}
unsigned wire_blocks(size_t n) { return static_cast<unsigned>(std::min<size_t>((n + 255) / 256, 4096)); }

std::string host_name() {
  char h[256] = {0};
  gethostname(h, sizeof(h) - 1);
  return h;
}

class NcclCommunicator final : public Communicator {
 public:
  /// dist.grad_dtype (mpi/communicator.hpp): bf16 rounds each bucket for ncclBfloat16, fp32 as is.
  void set_wire_dtype(WireDType w) override { grad_dtype_ = w == WireDType::bf16 ? DType::bf16 : DType::f32; }
  // `id` comes from rank 0 (ncclGetUniqueId), handed to every rank beforehand (make_nccl_communicator).
  // `bootstrap` (owned from here on; MPI_COMM_NULL for the unjoined test communicator) carries host bytes.
  NcclCommunicator(double timeout_s, int world, int rank, const ncclUniqueId& id, MPI_Comm bootstrap,
                   DType grad_dtype = DType::f32)
      : timeout_s_(timeout_s), host_(host_name()), rank_(rank), world_(world), bootstrap_(bootstrap),
        grad_dtype_(grad_dtype) {
    if (grad_dtype_ != DType::f32 && grad_dtype_ != DType::bf16) {
      free_bootstrap();
      throw RuntimeError(std::string("NCCL: gradient wire dtype ") + dtype_name(grad_dtype_) +
                         " is not supported (float32 or bfloat16)");
    }
    cuda::Context& cx = cuda::ctx();
    compute_ = cx.compute;
    // The communication stream gets the highest priority the device offers (the numerically lowest
    // value), so the gradient allreduces started during backward are scheduled ahead of the compute
    // kernels queued behind them instead of waiting for a free SM (as PyTorch DDP's NCCL streams).
    int least = 0, greatest = 0;
    HT_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    HT_CUDA_CHECK(cudaStreamCreateWithPriority(&comm_stream_, cudaStreamNonBlocking, greatest));
    HT_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
    HT_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));

    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclUniqueId uid = id;
    ncclResult_t rc = ncclCommInitRankConfig(&comm_, world_, uid, rank_, &config);
    try {
      if (rc != ncclSuccess && rc != ncclInProgress)
        fail("initialisation (ncclCommInitRankConfig)", std::string("NCCL error: ") + ncclGetErrorString(rc));
      settle("initialisation (ncclCommInitRankConfig over " + std::to_string(world_) + " ranks)");
    } catch (...) {
      // The destructor does not run for a constructor that throws: release the stream and events
      // here (the communicator itself was aborted by fail()/timeout()).
      release_cuda_objects();
      free_bootstrap();
      throw;
    }
  }

  ~NcclCommunicator() override {
    if (comm_) {
      if (std::uncaught_exceptions() > 0) {
        // Unwinding an error (this rank failed, or a collective timed out): the peers may never
        // finalise, and ncclCommFinalize waits until the communicator is globally quiescent, which
        // would hold this rank for up to timeout_s before it can report and end the job. Abort instead.
        ncclCommAbort(comm_);
      } else {
        // Normal end: flush, then destroy; a communicator that does not finalise in bounded time is
        // aborted.
        (void)ncclCommFinalize(comm_);
        const bool ok = poll_with_deadline(
            [&] {
              ncclResult_t st = ncclSuccess;
              if (ncclCommGetAsyncError(comm_, &st) != ncclSuccess) return true;
              return st != ncclInProgress;
            },
            timeout_s_ > 0 ? timeout_s_ : 30.0);
        if (ok) ncclCommDestroy(comm_);
        else ncclCommAbort(comm_);
      }
      comm_ = nullptr;
    }
    release_cuda_objects();
    free_bootstrap();
  }

  std::string name() const override { return "nccl"; }
  Device device() const override { return Device::cuda; }
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }

  void allreduce_sum(std::span<float> data) override {
    enqueue_allreduce(data, ncclSum, "allreduce_sum");
    wait("allreduce_sum of " + std::to_string(data.size()) + " floats");
  }
  void allreduce_average(std::span<float> data) override {
    enqueue_allreduce(data, ncclAvg, "allreduce_average");
    wait("allreduce_average of " + std::to_string(data.size()) + " floats");
  }
  void broadcast(std::span<float> data, int root) override {
    const std::string op = "broadcast from rank " + std::to_string(root) + " of " + std::to_string(data.size()) +
                           " floats";
    if (root < 0 || root >= world_) throw RuntimeError("NCCL " + op + ": root outside [0, " + std::to_string(world_) + ")");
    order_after_compute();
    check_usable(op);
    ncclResult_t rc = ncclBroadcast(data.data(), data.data(), data.size(), ncclFloat, root, comm_, comm_stream_);
    after_enqueue(rc, op);
    ++pending_;
    wait(op);
  }

  void reduce_sum(std::span<float> data, int root) override {
    const std::string op = "reduce_sum to rank " + std::to_string(root) + " of " + std::to_string(data.size()) +
                           " floats";
    if (root < 0 || root >= world_)
      throw RuntimeError("NCCL " + op + ": root outside [0, " + std::to_string(world_) + ")");
    order_after_compute();
    check_usable(op);
    ncclResult_t rc = ncclReduce(data.data(), data.data(), data.size(), ncclFloat, ncclSum, root, comm_, comm_stream_);
    after_enqueue(rc, op);
    ++pending_;
    wait(op);
  }
  void broadcast_bytes(std::vector<char>& bytes, int root) override {
    if (root < 0 || root >= world_)
      throw RuntimeError("NCCL broadcast_bytes: root " + std::to_string(root) + " outside [0, " +
                         std::to_string(world_) + ")");
    if (world_ == 1) return;
    if (bootstrap_ == MPI_COMM_NULL)
      throw RuntimeError("NCCL broadcast_bytes on rank " + std::to_string(rank_) +
                         ": this communicator was made without MPI (no bootstrap communicator)");
    mpi_broadcast_bytes(bytes, root, bootstrap_);
  }

  void start_allreduce_average(std::span<float> data) override {
    if (grad_dtype_ == DType::bf16) enqueue_allreduce_bf16(data);
    else enqueue_allreduce(data, ncclAvg, "allreduce_average");
    ++pending_;
    pending_floats_ += data.size();
  }

  double wait_all() override {
    if (pending_ == 0) return 0.0;
    const auto t0 = std::chrono::steady_clock::now();
    wait("allreduce_average (" + std::to_string(pending_) + " started operation(s), " +
         std::to_string(pending_floats_) + " floats)");
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }

 private:
  void check_usable(const std::string& op) const {
    if (!comm_)
      throw RuntimeError("NCCL " + op + " on rank " + std::to_string(rank_) +
                         ": the communicator was aborted after an earlier failure");
  }

  // The communication stream waits for everything issued on the compute stream so far.
  void order_after_compute() {
    HT_CUDA_CHECK(cudaEventRecord(ready_, compute_));
    HT_CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, ready_, 0));
  }

  void enqueue_allreduce(std::span<float> data, ncclRedOp_t op, const char* what) {
    const std::string name = std::string(what) + " of " + std::to_string(data.size()) + " floats";
    check_usable(name);
    order_after_compute();
    {
      NotedWait noted("NCCL allreduce of a gradient bucket: enqueued on the communication stream");
      ncclResult_t rc = ncclAllReduce(data.data(), data.data(), data.size(), ncclFloat, op, comm_, comm_stream_);
      after_enqueue(rc, name);
    }
  }

  // The bf16 wire: round into this operation's copy, average the copy, widen back, all on the
  // communication stream (see the header comment).
  void enqueue_allreduce_bf16(std::span<float> data) {
    const std::string name = "allreduce_average (bfloat16 on the wire) of " + std::to_string(data.size()) + " floats";
    check_usable(name);
    const size_t n = data.size();
    if (wire_.size() <= static_cast<size_t>(pending_)) wire_.resize(pending_ + 1);
    Tensor& buf = wire_[pending_];
    if (!buf.defined() || static_cast<size_t>(buf.numel()) < n)
      buf = Tensor::empty({static_cast<int64_t>(n)}, DType::bf16, Device::cuda);
    // After the allocation: a new copy is allocated in order on the compute stream.
    order_after_compute();
    auto* w = static_cast<bf16*>(buf.raw());
    if (n > 0) {
      to_bf16_kernel<<<wire_blocks(n), 256, 0, comm_stream_>>>(data.data(), w, n);
      HT_CUDA_CHECK(cudaGetLastError());
    }
    {
      NotedWait noted("NCCL allreduce of a gradient bucket: enqueued on the communication stream");
      ncclResult_t rc = ncclAllReduce(w, w, n, ncclBfloat16, ncclAvg, comm_, comm_stream_);
      after_enqueue(rc, name);
    }
    if (n > 0) {
      from_bf16_kernel<<<wire_blocks(n), 256, 0, comm_stream_>>>(w, data.data(), n);
      HT_CUDA_CHECK(cudaGetLastError());
    }
  }

  // A non-blocking communicator may answer ncclInProgress: the call is complete only once
  // ncclCommGetAsyncError no longer reports it.
  void after_enqueue(ncclResult_t rc, const std::string& op) {
    if (rc != ncclSuccess && rc != ncclInProgress) fail(op, std::string("NCCL error: ") + ncclGetErrorString(rc));
    if (rc == ncclInProgress) settle(op);
  }

  // Polls the communicator's state until it leaves ncclInProgress, under the time limit.
  void settle(const std::string& op) {
    ncclResult_t st = ncclInProgress;
    const bool ok = poll_with_deadline(
        [&] {
          ncclResult_t rc = ncclCommGetAsyncError(comm_, &st);
          if (rc != ncclSuccess) st = rc;
          return st != ncclInProgress;
        },
        timeout_s_);
    if (!ok) timeout(op);
    if (st != ncclSuccess) fail(op, std::string("NCCL asynchronous error: ") + ncclGetErrorString(st));
  }

  // Waits (polling) for all work on the communication stream, then orders the compute stream after it.
  void wait(const std::string& op) {
    // In the flight record while it lasts: a time-out below leaves it "waiting" there.
    NotedWait noted("NCCL wait for the communication stream's event (every enqueued gradient bucket done)");
    HT_CUDA_CHECK(cudaEventRecord(done_, comm_stream_));
    cudaError_t cerr = cudaSuccess;
    ncclResult_t st = ncclSuccess;
    const bool ok = poll_with_deadline(
        [&] {
          cudaError_t q = cudaEventQuery(done_);
          if (q == cudaSuccess) return true;
          if (q != cudaErrorNotReady) {
            cerr = q;
            return true;
          }
          ncclResult_t rc = ncclCommGetAsyncError(comm_, &st);
          if (rc != ncclSuccess) st = rc;
          return st != ncclSuccess && st != ncclInProgress;
        },
        timeout_s_, 200);
    if (!ok) timeout(op);
    if (cerr != cudaSuccess) {
      pending_ = 0;
      fail(op, std::string("CUDA error: ") + cudaGetErrorName(cerr) + ": " + cudaGetErrorString(cerr));
    }
    if (st != ncclSuccess && st != ncclInProgress)
      fail(op, std::string("NCCL asynchronous error: ") + ncclGetErrorString(st));
    HT_CUDA_CHECK(cudaStreamWaitEvent(compute_, done_, 0));
    pending_ = 0;
    pending_floats_ = 0;
  }

  [[noreturn]] void timeout(const std::string& op) {
    // NCCL's own view first (RAS, mpi/nccl_ras.hpp), while this rank's communicator still takes part.
    const std::string ras = nccl_ras_timeout_note(rank_);
    abort_comm();
    // Name the lost peers as the collective guard does (the beacon answers without NCCL or MPI).
    throw RuntimeError(nccl_timeout_message(rank_, host_, op, timeout_s_, nccl_settings_text(),
                                            probe_peers_text(kProbeWindowS) + ras));
  }

  [[noreturn]] void fail(const std::string& op, const std::string& cause) {
    abort_comm();
    std::ostringstream os;
    os << "NCCL " << op << " failed on rank " << rank_ << " (" << host_ << "): " << cause
       << ". The communicator was aborted. NCCL settings in effect: " << nccl_settings_text()
       << ". Rerun with NCCL_DEBUG=INFO to see the cause.";
    throw RuntimeError(os.str());
  }

  void release_cuda_objects() {
    if (done_) cudaEventDestroy(done_);
    if (ready_) cudaEventDestroy(ready_);
    if (comm_stream_) cudaStreamDestroy(comm_stream_);
    done_ = ready_ = nullptr;
    comm_stream_ = nullptr;
  }

  void free_bootstrap() {
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (bootstrap_ != MPI_COMM_NULL && inited && !finalized) MPI_Comm_free(&bootstrap_);
    bootstrap_ = MPI_COMM_NULL;
  }

  void abort_comm() {
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
    pending_ = 0;
    pending_floats_ = 0;
  }

  double timeout_s_;
  std::string host_;
  int rank_ = 0, world_ = 1;
  ncclComm_t comm_ = nullptr;
  MPI_Comm bootstrap_ = MPI_COMM_NULL;
  cudaStream_t compute_ = nullptr;
  cudaStream_t comm_stream_ = nullptr;
  cudaEvent_t ready_ = nullptr, done_ = nullptr;
  int pending_ = 0;
  size_t pending_floats_ = 0;
  DType grad_dtype_ = DType::f32;
  std::vector<Tensor> wire_;  ///< bf16 wire: the copy of the k-th started operation of a step
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(double timeout_s, DType grad_dtype) {
  int rank = 0, world = 1;
  HT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  HT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  // Rank 0 first tells the others whether ncclGetUniqueId worked, so that a failure there is an
  // error on every rank rather than one rank throwing while the others wait in MPI_Bcast.
  int ok = 1;
  std::string err;
  if (rank == 0) {
    ncclResult_t rc = ncclGetUniqueId(&id);
    if (rc != ncclSuccess) {
      ok = 0;
      err = ncclGetErrorString(rc);
    }
  }
  // The bootstrap's waits on peers are bounded like every other (a peer dying between its
  // ncclGetUniqueId and these broadcasts must not hang the others).
  CollectiveWait wait("make_nccl_communicator: the NCCL unique id (MPI_Bcast) and the bootstrap communicator (MPI_Comm_dup)");
  HT_MPI_CHECK(MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD));
  if (!ok)
    throw RuntimeError("NCCL initialisation on rank " + std::to_string(rank) + ": ncclGetUniqueId failed on rank 0" +
                       (err.empty() ? std::string() : ": " + err) + ". NCCL settings in effect: " +
                       nccl_settings_text() + ". Rerun with NCCL_DEBUG=INFO to see the cause.");
  HT_MPI_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD));
  MPI_Comm bootstrap = MPI_COMM_NULL;
  HT_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &bootstrap));
  HT_MPI_CHECK(MPI_Comm_set_errhandler(bootstrap, MPI_ERRORS_RETURN));
  return std::make_unique<NcclCommunicator>(timeout_s, world, rank, id, bootstrap, grad_dtype);
}

std::unique_ptr<Communicator> make_nccl_communicator_unjoined_for_test(int nranks, int rank, double timeout_s,
                                                                      DType grad_dtype) {
  ncclUniqueId id;
  HT_NCCL_CHECK(ncclGetUniqueId(&id));
  return std::make_unique<NcclCommunicator>(timeout_s, nranks, rank, id, MPI_COMM_NULL, grad_dtype);
}

}  // namespace ht
