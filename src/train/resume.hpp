#pragma once
// Checkpointing inside training: resume / fresh start / --init-from at start-up, periodic and
// Young/Daly-timed asynchronous checkpoints, stop signals agreed across ranks at step boundaries,
// and the final (or stop) checkpoint with exit code 75. The Trainer calls three hooks
// (Trainer::set_checkpoint_hooks); everything else lives here.
//
// State in a checkpoint (io/checkpoint_format.hpp): param/*, buffer/* (BatchNorm running statistics
// averaged across ranks), momentum/*; ints step, epoch, step_in_epoch (the sample cursor in global
// steps), world_size, seed, global_batch, total_steps, steps_per_epoch, nonfinite_in_row,
// nonfinite_total; floats lr (of the next step), loss_scale; strings model, config, config_hash.
// Because sampling and augmentation depend only on (seed, epoch, global sample index), the same
// state resumes exactly on the same world_size and continues the same sample stream on another.
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/checkpoint_store.hpp"
#include "io/checkpoint_writer.hpp"

namespace ht {

class Trainer;
struct TrainSummary;

/// Command-line arguments of `hpctrain train` that are not config keys.
struct CheckpointArgs {
  std::string init_from;    ///< --init-from CHECKPOINT: load parameters (and buffers) only
  bool reset_head = false;  ///< --reset-head: keep the last linear layer as initialised (new class count)
};
/// Parses --init-from PATH, --init-from=PATH and --reset-head from parse_config's extra arguments;
/// throws UsageError naming anything else.
CheckpointArgs parse_checkpoint_args(const std::vector<std::string>& extra);

/// Names of the last linear layer's parameters ("fc.weight", "fc.bias" for ResNets): the last
/// two-dimensional "*.weight" parameter and its bias.
std::vector<std::string> head_param_names(const std::vector<std::string>& param_names,
                                          const std::vector<int>& param_ndims);

class CheckpointManager {
 public:
  /// Installs the stop-signal handlers (checkpoint.signals) and the trainer hooks. Collective.
  CheckpointManager(Trainer& trainer, CheckpointArgs args);
  ~CheckpointManager();

  /// Start-up, all ranks: run.fresh, leftover temporary files, resume from the newest valid
  /// checkpoint (rank 0 reads and verifies, every rank receives the state by broadcast), or
  /// --init-from; refuses a changed model or global batch unless run.allow_config_change; checks
  /// free space for one checkpoint. Throws UsageError (exit 2) or RuntimeError (exit 1) on every rank.
  void start();

  /// Step boundary hook, all ranks: agrees on stop signals / due checkpoints / a failed background
  /// write, starts periodic asynchronous checkpoints. Returns true when training must stop now.
  bool step_end();

  /// End of run, all ranks: the final or stop checkpoint (synchronous), then exit code 0, 75
  /// (stopped by a signal, checkpoint saved) or 1 (a checkpoint write failed), agreed by all ranks.
  void run_end(TrainSummary& s);

 private:
  CheckpointData collect();  // collective: rank 0 gets the full state, buffers averaged over ranks
  void save(bool sync, const std::string& reason);
  void report_completed();   // rank 0: metrics "checkpoint" events, Young/Daly update
  void update_interval(double cost_s);

  Trainer& t_;
  CheckpointArgs args_;
  std::unique_ptr<CheckpointWriter> writer_;
  int rank_ = 0, world_ = 1;
  int64_t last_saved_step_ = -1;
  bool stop_ = false, failed_ = false, raised_ = false;
  std::string fail_message_;
  std::chrono::steady_clock::time_point last_save_time_;
  double interval_s_ = 0;      // time-based interval (every_minutes or Young/Daly); 0 = none
  bool need_measure_ = false;  // Young/Daly: checkpoint once early to measure the cost
  double cost_s_ = 0;          // measured checkpoint cost (copy + stall + write)
  struct Pending {
    double copy_ms = 0, stall_ms = 0;
    std::string reason;
  };
  std::map<int64_t, Pending> pending_;
};

}  // namespace ht
