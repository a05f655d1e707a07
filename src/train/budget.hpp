#pragma once
// The run's budget (run.max_hours, run.max_gpu_hours, run.max_cost at run.price_per_gpu_hour) and
// its spending so far. Everything counts over the whole run: this start plus the earlier starts of
// the same run directory recorded in metrics.jsonl (from each run_start to that start's last event;
// a start with run.fresh = true begins a new run). GPU-hours are wall hours x world_size: one
// device per rank, a CPU rank counting as one device. Rank 0 decides; the stop is agreed by every
// rank through the checkpoint manager's step flags (kFlagBudget, src/train/signals.hpp), which saves
// a checkpoint and ends with exit code 3 and run_end status "budget" (docs/exit_codes.md).
#include <cstdint>
#include <deque>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "base/clock.hpp"
#include "src/train/config.hpp"

namespace ht {

/// What the run has spent: wall hours, device hours and their cost (gpu_hours x price).
struct Spend {
  double wall_hours = 0;
  double gpu_hours = 0;
  double cost = 0;
};

/// The spending of the earlier starts recorded in a metrics.jsonl file (docs/metrics.md), at
/// `price_per_gpu_hour`: per start, (time of its last event - time of its run_start) x its
/// world_size; starts before the last one whose config has run.fresh = true are not counted.
/// A missing file or unreadable lines count as nothing. Never throws.
Spend previous_spend(const std::string& metrics_path, double price_per_gpu_hour);

class RunBudget {
 public:
  /// `devices`: the devices this start uses (world_size). `previous`: previous_spend of the run.
  /// `gpu`: the devices are GPUs; otherwise the console and messages say rank-hours ("rank-h"), as
  /// the report does (the run_end fields keep their names, docs/metrics.md).
  RunBudget(const Config::Run& run, int devices, Spend previous = {}, bool gpu = true);
  /// Starts this start's clock (at run_start).
  void begin(SteadyClock::time_point t = SteadyClock::now());
  /// Records one step's wall time, for the prediction of the next step.
  void on_step(double step_ms);
  /// The measured cost of a checkpoint (seconds), kept as the prediction of the final save.
  void set_checkpoint_cost_s(double s) { checkpoint_s_ = s; }
  /// Spending so far (earlier starts + this one up to `now`).
  Spend spent(SteadyClock::time_point now = SteadyClock::now()) const;
  /// True when some limit is set.
  bool limited() const;
  /// When one more step (the slowest of the last few) plus a checkpoint save would cross a limit:
  /// the message naming the key, its value and the spending; empty otherwise.
  std::optional<std::string> would_cross(SteadyClock::time_point now = SteadyClock::now()) const;
  /// " cost 1.23 (0.50 GPU-h)" for the progress line (" 0.50 GPU-h" without a price; rank-h on CPU).
  std::string console_text(SteadyClock::time_point now = SteadyClock::now()) const;
  /// run_end fields: wall_hours, gpu_hours, cost, price_per_gpu_hour (the whole run so far).
  nlohmann::json fields(SteadyClock::time_point now = SteadyClock::now()) const;

 private:
  Config::Run run_;
  int devices_ = 1;
  Spend previous_;
  bool gpu_ = true;
  SteadyClock::time_point t0_ = SteadyClock::now();
  std::deque<double> recent_ms_;  ///< the last few step times
  double checkpoint_s_ = 0;
};

}  // namespace ht
