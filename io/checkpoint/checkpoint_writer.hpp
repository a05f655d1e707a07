#pragma once
// Asynchronous checkpoint writing: the trainer hands over a host copy of the state and keeps
// training while a background thread writes it (io/checkpoint/checkpoint_store.hpp: atomic write, LATEST, pruning).
// At most one write is in flight: the next save() first waits for the previous one, and that wait
// is the "stall" the training loop sees.
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "io/checkpoint/checkpoint_store.hpp"

namespace ht {

/// What one save() cost the caller.
struct CheckpointSaveStats {
  int64_t step = 0;
  double stall_ms = 0;  ///< time save() blocked waiting for the previous write (or, sync, the whole write)
};

class CheckpointWriter {
 public:
  /// `async` false: save() writes before returning (checkpoint.async = false).
  CheckpointWriter(std::string run_dir, CheckpointWriteOptions opt, bool async);
  /// Waits for the write in flight; errors are swallowed here (call wait() to see them).
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  /// Takes `data` (host tensors the caller no longer touches), waits for the previous write, then
  /// writes step `step` in the background. Throws RuntimeError if the previous write failed (the
  /// error names the path and bytes needed) or, when synchronous, if this one fails.
  CheckpointSaveStats save(int64_t step, CheckpointData data);

  /// Blocks until no write is in flight. Throws RuntimeError if the last write failed.
  void wait();

  /// Non-blocking: the error of a finished, failed write ("" when none). The failure stays
  /// recorded: the next save() or wait() throws it.
  std::string error() const;
  /// Non-blocking: a write is in flight.
  bool busy() const;

  /// Writes completed since the last call (path, bytes, write_ms), oldest first; for metrics.
  std::vector<CheckpointWriteResult> take_completed();

  const std::string& run_dir() const { return run_dir_; }

 private:
  void join();
  std::string run_dir_;
  CheckpointWriteOptions opt_;
  bool async_;
  std::thread thread_;
  mutable std::mutex mu_;
  bool in_flight_ = false;
  std::string error_;
  std::vector<CheckpointWriteResult> completed_;
};

}  // namespace ht
