#include "io/checkpoint/checkpoint_writer.hpp"

#include <chrono>
#include <cmath>

#include "base/error.hpp"

namespace ht {

CheckpointWriter::CheckpointWriter(std::string run_dir, CheckpointWriteOptions opt, bool async)
    : run_dir_(std::move(run_dir)), opt_(opt), async_(async) {}

CheckpointWriter::~CheckpointWriter() { join(); }

void CheckpointWriter::join() {
  if (thread_.joinable()) thread_.join();
}

CheckpointSaveStats CheckpointWriter::save(int64_t step, CheckpointData data) {
  auto t0 = std::chrono::steady_clock::now();
  CheckpointSaveStats st;
  st.step = step;
  wait();  // throws the previous failure
  if (!async_) {
    auto r = write_checkpoint(run_dir_, step, data, opt_);
    std::lock_guard<std::mutex> lk(mu_);
    completed_.push_back(std::move(r));
  } else {
    {
      std::lock_guard<std::mutex> lk(mu_);
      in_flight_ = true;
    }
    thread_ = std::thread([this, step, d = std::move(data)]() {
      CheckpointWriteResult r;
      std::string err;
      try {
        r = write_checkpoint(run_dir_, step, d, opt_);
      } catch (const std::exception& e) {
        err = e.what();
      } catch (...) {
        err = "unknown error while writing checkpoint step " + std::to_string(step);
      }
      std::lock_guard<std::mutex> lk(mu_);
      if (err.empty()) completed_.push_back(std::move(r));
      else error_ = err;
      in_flight_ = false;
    });
  }
  st.stall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return st;
}

void CheckpointWriter::wait() {
  join();
  std::lock_guard<std::mutex> lk(mu_);
  if (!error_.empty()) throw RuntimeError(error_);
}

std::string CheckpointWriter::error() const {
  std::lock_guard<std::mutex> lk(mu_);
  return error_;
}

bool CheckpointWriter::busy() const {
  std::lock_guard<std::mutex> lk(mu_);
  return in_flight_;
}

std::vector<CheckpointWriteResult> CheckpointWriter::take_completed() {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<CheckpointWriteResult> out;
  out.swap(completed_);
  return out;
}

}  // namespace ht
