#pragma once
// Checkpointing inside training: resume / fresh start / --init-from at start-up, periodic and
// Young/Daly-timed asynchronous checkpoints (src/train/checkpoint_schedule.hpp), stop signals agreed
// across ranks at step boundaries, and the final (or stop) checkpoint with exit code 75. The Trainer
// owns one (Trainer::checkpoints_) and calls step_end and run_end from its loop; everything else
// lives here.
//
// What a checkpoint holds is the typed TrainingState (src/train/training_state.hpp), which the
// Trainer captures and restores (Trainer::capture_state / restore_state); rank 0 reads and writes the
// files, and the state reaches the other ranks through the trainer's Communicator (broadcast_bytes).
// Because sampling and augmentation depend only on (seed, epoch, global sample index), the same
// state resumes exactly on the same world_size and continues the same sample stream on another.
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "io/checkpoint/checkpoint_store.hpp"
#include "src/train/training_state.hpp"
#include "io/checkpoint/checkpoint_writer.hpp"
#include "src/train/checkpoint_schedule.hpp"

namespace ht {

class MetricsWriter;
class Trainer;
struct Config;
struct TrainSummary;

/// Command-line arguments of `hpctrain train` that are not config keys (parsed by the CLI:
/// parse_checkpoint_args in src/cli/train_args.hpp).
struct CheckpointArgs {
  std::string init_from;    ///< --init-from CHECKPOINT: load parameters (and buffers) only
  bool reset_head = false;  ///< --reset-head: keep the last linear layer as initialised (new class count)
};

class CheckpointManager {
 public:
  /// For `trainer` (which owns it and has finished its own set-up). The stop signals are installed
  /// by `hpctrain train` before this (a default set at process start, then checkpoint.signals once
  /// the config is read, src/cli/main.cpp); nothing collective.
  CheckpointManager(Trainer& trainer, CheckpointArgs args);
  /// Waits for a write in flight (its error is printed unless run_end reported it) and retires the
  /// stop-signal handlers (retire_stop_signals: TERM and INT get their default action back).
  ~CheckpointManager();

  /// Start-up, all ranks: run.fresh, leftover temporary files, resume from the newest valid
  /// checkpoint (rank 0 reads and verifies, every rank receives the state by broadcast), or
  /// --init-from; refuses a changed model or global batch unless run.allow_config_change; checks
  /// free space for one checkpoint. Throws UsageError (exit 2) or RuntimeError (exit 1) on every rank.
  void start();

  /// At each step boundary (Trainer::run), all ranks: agrees on stop signals / due checkpoints / a failed background
  /// write, starts periodic asynchronous checkpoints. Returns true when training must stop now.
  bool step_end();

  /// End of run, all ranks: the final or stop checkpoint (synchronous), then exit code 0, 75
  /// (stopped by a signal, checkpoint saved), 3 (stopped by the budget, run.max_*, checkpoint saved)
  /// or 1 (a checkpoint write failed), agreed by all ranks.
  void run_end(TrainSummary& s);

 private:
  /// Rank 0's start-up work (fresh, clean-up, load, config checks, free space): how to start and
  /// the serialised state to broadcast. Throws UsageError / RuntimeError.
  struct StartPlan;
  StartPlan plan_start();
  void save(bool sync, CheckpointReason reason);
  /// Rank 0's part of save(): the checkpoint handed to the background writer (waited for when sync).
  void save_on_rank0(TrainingState state, bool sync, CheckpointReason reason,
                     std::chrono::steady_clock::time_point t0);
  void report_completed();  // rank 0: metrics "checkpoint" events, Young/Daly update
  void raise_test_signal(); // HT_TEST_FAULTS signal_at_step / signal_rank

  Trainer& t_;
  const Config& cfg_;
  const TrainProgress& prog_;  // the trainer's progress (read-only here: restore_state sets it)
  MetricsWriter* metrics_;     // rank 0; nullptr elsewhere
  int64_t total_steps_ = 0, steps_per_epoch_ = 0;
  CheckpointArgs args_;
  std::unique_ptr<CheckpointWriter> writer_;
  CheckpointSchedule schedule_;
  int rank_ = 0, world_ = 1;
  int64_t last_saved_step_ = -1;
  int64_t signal_at_step_ = -1;  // test fault: SIGTERM to this process after this step (-1: none)
  int64_t signal_rank_ = 0;      // test fault: the rank that signals itself
  bool stop_ = false, failed_ = false, raised_ = false;
  bool budget_stop_ = false;   // every rank: run.max_* reached (kFlagBudget agreed)
  std::string budget_reason_;  // rank 0: which limit, with the figures
  bool slow_stop_ = false;     // every rank: watchdog.slow_rank_stop_windows reached (kFlagSlowRank agreed)
  std::string slow_reason_;    // rank 0: which rank, host and windows
  std::string fail_message_;
  struct Pending {
    double copy_ms = 0, stall_ms = 0;
    CheckpointReason reason = CheckpointReason::final;
  };
  std::map<int64_t, Pending> pending_;
};

}  // namespace ht
