#include "mpi/mpi_communicator.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <sstream>
#include <thread>

#include "mpi/check.hpp"
#include "mpi/collective_guard.hpp"
#include "mpi/wire_bf16.hpp"
#include "base/clock.hpp"
#include "base/log.hpp"

namespace ht {

namespace {

using Clock = std::chrono::steady_clock;

// MPI counts are int: large spans go in chunks (each chunk is itself a complete collective).
constexpr int64_t kMaxChunk = int64_t{1} << 30;

/// Calls f(offset, count) for consecutive chunks of at most kMaxChunk elements covering [0, size).
template <class F> void for_each_chunk(size_t size, F&& f) {
  for (size_t off = 0; off < size; off += kMaxChunk)
    f(off, static_cast<int>(std::min<int64_t>(kMaxChunk, static_cast<int64_t>(size - off))));
}

void allreduce_sum_chunks(std::span<float> data, MPI_Comm comm) {
  for_each_chunk(data.size(), [&](size_t off, int n) {
    HT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data.data() + off, n, MPI_FLOAT, MPI_SUM, comm));
  });
}

void divide(std::span<float> data, float n) {
  // Division (not multiplication by 1/n) so the result is the correctly rounded average.
  for (float& x : data) x /= n;
}
void divide(std::span<float> data, int world) { divide(data, static_cast<float>(world)); }

// The MPI reduction for dist.grad_dtype = bf16 (MPI has no bfloat16 type: the data travels as
// MPI_UINT16_T): each pair summed in float32, rounded once.
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  wire::sum_into(static_cast<const uint16_t*>(in), static_cast<uint16_t*>(inout), static_cast<size_t>(*len));
}

// The average of `data` with a bf16 wire: narrowed into `wire_buf`, summed over ranks with `op`,
// widened and divided by `divisor` in one pass.
void allreduce_bf16(std::span<float> data, float divisor, MPI_Op op, MPI_Comm comm, std::vector<uint16_t>& wire_buf) {
  wire_buf.resize(data.size());
  wire::narrow(data, wire_buf.data());
  for_each_chunk(data.size(), [&](size_t off, int n) {
    HT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, wire_buf.data() + off, n, MPI_UINT16_T, op, comm));
  });
  for (size_t i = 0; i < data.size(); ++i) data[i] = wire::f32_from_bf16(wire_buf[i]) / divisor;
}

bool mpi_alive() {
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  return inited && !finalized;
}

}  // namespace

struct MpiCommunicator::Shared {
  struct Item {
    std::span<float> data;  // host memory
    int64_t seq;
    WireDType wire = WireDType::f32;
    float divisor = 1;      // world_size x the loss scale's unscale
  };
  std::mutex mu;
  std::condition_variable work_cv;  // caller -> thread: an item was queued, or stop
  std::condition_variable done_cv;  // thread -> caller: an item completed, or the thread exited
  std::deque<Item> queue;
  int64_t started = 0;      // items ever queued
  int64_t completed = 0;    // items the thread has finished (or skipped after an error)
  int64_t running_seq = -1; // item in MPI right now, -1 if none
  int64_t inject_at = -1;   // test hook: seq that fails
  std::string error;        // first failure, with rank and operation
  bool stop = false, exited = false;
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Op bf16_sum = MPI_OP_NULL;   // the bf16 wire's reduction
  std::vector<uint16_t> wire_buf;  // the bf16 wire's buffer (thread only)
  int rank = 0, world = 1;
  std::thread thread;
  Communicator::AsyncObserver observer;  // timeline tracing; set before the thread starts

  void run() {
    for (;;) {
      Item item;
      {
        std::unique_lock lk(mu);
        work_cv.wait(lk, [&] { return stop || !queue.empty(); });
        if (queue.empty()) break;  // stop requested and nothing left
        item = queue.front();
        queue.pop_front();
        if (!error.empty()) {  // after a failure the rest are skipped: wait_all reports the failure
          ++completed;
          done_cv.notify_all();
          continue;
        }
        running_seq = item.seq;
      }
      std::string err;
      const auto t_begin = std::chrono::steady_clock::now();
      try {
        if (item.seq == inject_at) throw RuntimeError("injected failure (test hook)");
        CollectiveWait wait("background allreduce_average of a gradient bucket (MPI communication thread)");
        if (item.wire == WireDType::bf16) {
          allreduce_bf16(item.data, item.divisor, bf16_sum, comm, wire_buf);
        } else {
          allreduce_sum_chunks(item.data, comm);
          divide(item.data, item.divisor);
        }
      } catch (const std::exception& e) {
        err = e.what();
      }
      if (observer && err.empty()) observer(item.seq, t_begin, std::chrono::steady_clock::now());
      std::lock_guard lk(mu);
      running_seq = -1;
      ++completed;
      if (!err.empty() && error.empty()) {
        std::ostringstream os;
        os << "rank " << rank << ": background allreduce_average #" << item.seq << " of " << item.data.size()
           << " floats (MPI communication thread) failed: " << err;
        error = os.str();
      }
      done_cv.notify_all();
    }
    std::lock_guard lk(mu);
    exited = true;
    done_cv.notify_all();
  }
};

MpiCommunicator::MpiCommunicator(MPI_Comm base, Device device, double timeout_s)
    : device_(device), timeout_s_(timeout_s), s_(std::make_shared<Shared>()) {
  HT_MPI_CHECK(MPI_Comm_rank(base, &rank_));
  HT_MPI_CHECK(MPI_Comm_size(base, &world_));
  {
    CollectiveWait wait("MPI_Comm_dup (communicator set-up)");
    HT_MPI_CHECK(MPI_Comm_dup(base, &main_comm_));
    HT_MPI_CHECK(MPI_Comm_dup(base, &s_->comm));
  }
  // Errors come back as codes so HT_MPI_CHECK can name rank, host and call.
  HT_MPI_CHECK(MPI_Comm_set_errhandler(main_comm_, MPI_ERRORS_RETURN));
  HT_MPI_CHECK(MPI_Comm_set_errhandler(s_->comm, MPI_ERRORS_RETURN));
  HT_MPI_CHECK(MPI_Op_create(&bf16_sum, /*commute=*/1, &s_->bf16_sum));
  s_->rank = rank_;
  s_->world = world_;
}

MpiCommunicator::~MpiCommunicator() {
  bool joined = true;
  if (s_->thread.joinable()) {
    std::unique_lock lk(s_->mu);
    s_->stop = true;
    s_->work_cv.notify_all();
    // Idle: the thread exits at once. Busy (we are unwinding an error while operations are in
    // flight, or after a timeout): give it a bounded grace, then leave it behind so this rank can
    // report and MPI_Abort instead of hanging here. The thread keeps s_ alive.
    const double grace_s = std::max(10.0, timeout_s_);
    joined = s_->done_cv.wait_for(lk, std::chrono::duration<double>(grace_s), [&] { return s_->exited; });
    lk.unlock();
    if (joined) {
      s_->thread.join();
    } else {
      log_raw_err("hpctrain: rank " + std::to_string(rank_) +
                  ": MPI communication thread still busy at shutdown; leaving it");
      s_->thread.detach();
    }
  }
  if (mpi_alive()) {
    if (main_comm_ != MPI_COMM_NULL) MPI_Comm_free(&main_comm_);
    if (joined && s_->comm != MPI_COMM_NULL) MPI_Comm_free(&s_->comm);
    if (joined && s_->bf16_sum != MPI_OP_NULL) MPI_Op_free(&s_->bf16_sum);
  }
}

void MpiCommunicator::ensure_thread() {
  if (!s_->thread.joinable()) s_->thread = std::thread([s = s_] { s->run(); });
}

std::span<float> MpiCommunicator::stage_in(std::span<float> data, size_t slot) {
  if (device_ == Device::cpu) return data;
  if (slot == SIZE_MAX) {
    blocking_stage_.resize(data.size());
    slot = 0;
    allocator_for(device_).copy(blocking_stage_.data(), data.data(), data.size_bytes(), Device::cpu, device_);
    return {blocking_stage_.data(), data.size()};
  }
  if (staging_.size() <= slot) staging_.resize(slot + 1);
  auto& buf = staging_[slot];
  buf.resize(data.size());
  allocator_for(device_).copy(buf.data(), data.data(), data.size_bytes(), Device::cpu, device_);
  return {buf.data(), data.size()};
}

void MpiCommunicator::stage_out(std::span<float> host, std::span<float> data) {
  if (device_ == Device::cpu) return;
  allocator_for(device_).copy(data.data(), host.data(), data.size_bytes(), device_, Device::cpu);
}

template <class Exchange>
void MpiCommunicator::blocking(std::span<float> data, const char* what, Exchange&& exchange, bool copy_back) {
  if (world_ == 1 || data.empty()) return;
  auto host = stage_in(data, SIZE_MAX);
  {
    CollectiveWait wait(what);
    exchange(host);
  }
  if (copy_back) stage_out(host, data);
}

void MpiCommunicator::allreduce_sum(std::span<float> data) {
  blocking(data, "allreduce_sum", [&](std::span<float> host) { allreduce_sum_chunks(host, main_comm_); });
}

void MpiCommunicator::allreduce_average(std::span<float> data) {
  blocking(data, "allreduce_average", [&](std::span<float> host) {
    allreduce_sum_chunks(host, main_comm_);
    divide(host, world_);
  });
}

void MpiCommunicator::check_root(const char* op, int root) const {
  if (root < 0 || root >= world_)
    throw RuntimeError(std::string("MpiCommunicator::") + op + ": root " + std::to_string(root) + " outside [0, " +
                       std::to_string(world_) + ")");
}

void MpiCommunicator::broadcast(std::span<float> data, int root) {
  check_root("broadcast", root);
  blocking(data, "broadcast", [&](std::span<float> host) {
    for_each_chunk(host.size(), [&](size_t off, int n) {
      HT_MPI_CHECK(MPI_Bcast(host.data() + off, n, MPI_FLOAT, root, main_comm_));
    });
  });
}

void MpiCommunicator::reduce_sum(std::span<float> data, int root) {
  check_root("reduce_sum", root);
  blocking(
      data, "reduce_sum",
      [&](std::span<float> host) {
        for_each_chunk(host.size(), [&](size_t off, int n) {
          if (rank_ == root)
            HT_MPI_CHECK(MPI_Reduce(MPI_IN_PLACE, host.data() + off, n, MPI_FLOAT, MPI_SUM, root, main_comm_));
          else
            HT_MPI_CHECK(MPI_Reduce(host.data() + off, nullptr, n, MPI_FLOAT, MPI_SUM, root, main_comm_));
        });
      },
      rank_ == root);
}

void MpiCommunicator::broadcast_bytes(std::vector<char>& bytes, int root) {
  check_root("broadcast_bytes", root);
  if (world_ == 1) return;
  mpi_broadcast_bytes(bytes, root, main_comm_);
}

void mpi_broadcast_bytes(std::vector<char>& bytes, int root, MPI_Comm comm) {
  CollectiveWait wait("broadcast_bytes");
  uint64_t n = bytes.size();
  HT_MPI_CHECK(MPI_Bcast(&n, 1, MPI_UINT64_T, root, comm));
  bytes.resize(n);
  for_each_chunk(bytes.size(), [&](size_t off, int count) {
    HT_MPI_CHECK(MPI_Bcast(bytes.data() + off, count, MPI_CHAR, root, comm));
  });
}

void MpiCommunicator::set_async_observer(AsyncObserver obs) {
  std::lock_guard lk(s_->mu);
  s_->observer = std::move(obs);
}

void MpiCommunicator::start_allreduce_average(std::span<float> data) {
  if (world_ == 1) return;  // the average over one rank is the data itself: no thread hop
  {
    std::lock_guard lk(s_->mu);
    if (!s_->error.empty()) throw RuntimeError(s_->error);
  }
  std::span<float> host = stage_in(data, pending_copy_back_.size());
  if (device_ != Device::cpu) pending_copy_back_.emplace_back(host, data);
  ensure_thread();
  std::lock_guard lk(s_->mu);
  s_->queue.push_back({host, s_->started++, wire_, static_cast<float>(world_) * unscale_});
  s_->work_cv.notify_one();
}

double MpiCommunicator::wait_all() {
  if (world_ == 1) return 0.0;
  const auto t0 = Clock::now();
  {
    std::unique_lock lk(s_->mu);
    auto done = [&] { return s_->completed == s_->started; };
    if (timeout_s_ > 0) {
      if (!s_->done_cv.wait_for(lk, std::chrono::duration<double>(timeout_s_), done)) {
        std::ostringstream os;
        os << "rank " << rank_ << ": allreduce_average timed out: " << (s_->started - s_->completed)
           << " started operation(s) (";
        if (s_->running_seq >= 0)
          os << "#" << s_->running_seq << " inside MPI_Allreduce";
        else
          os << "queued";
        os << ") not complete after " << timeout_s_
           << " s; another rank has probably failed or stalled (check its log), or raise the time limit";
        throw RuntimeError(os.str());
      }
    } else {
      s_->done_cv.wait(lk, done);
    }
    if (!s_->error.empty()) throw RuntimeError(s_->error);
  }
  for (auto& [host, dev] : pending_copy_back_) stage_out(host, dev);
  pending_copy_back_.clear();
  return ms_since(t0);
}

void MpiCommunicator::set_wire_dtype(WireDType w) { wire_ = w; }

bool MpiCommunicator::set_average_unscale(float scale) {
  unscale_ = scale;
  return true;
}

void MpiCommunicator::inject_failure_for_test(int64_t nth) {
  std::lock_guard lk(s_->mu);
  s_->inject_at = s_->started + nth;
}

}  // namespace ht
