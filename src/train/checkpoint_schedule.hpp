#pragma once
// When to take a periodic checkpoint during training (checkpoint.every_steps, checkpoint.every_minutes,
// checkpoint.mtbf_minutes). Pure decisions, no I/O and no collectives: the checkpoint manager
// (src/train/checkpoint_manager.cpp) asks at each step boundary, after the ranks agreed on whether a
// time-based checkpoint is due (rank 0's clock decides, see CheckpointSchedule::time_due).
//
// Rules, in order of precedence at a step boundary that may checkpoint:
//   1. Young/Daly (mtbf_minutes > 0): the first such boundary checkpoints once to measure the cost C
//      (reason "young_daly_measure"); afterwards the interval is checkpoint_interval_s(C, MTBF) =
//      sqrt(2 C MTBF) - C (Daly; Young's sqrt(2 C MTBF) once C >= MTBF/2), C being the running mean of measured costs (copy + stall + write), and a
//      due interval gives reason "young_daly".
//   2. every_minutes > 0 (without mtbf_minutes): a due interval gives reason "every_minutes".
//   3. every_steps > 0: a step that is a multiple of it gives reason "every_steps".
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace ht {

/// The checkpoint interval in seconds for checkpoint cost `cost_s` and mean time between failures
/// `mtbf_s` (seconds): Daly's first-order optimum sqrt(2 C M) - C (J. T. Daly, FGCS 2006) while
/// C < M/2, Young's sqrt(2 C M) (CACM 1974) beyond. Daly rather than Young: Young's derivation leaves
/// out the time spent writing the checkpoint itself, which Daly's refinement subtracts; the two agree
/// when C << M. Past C = M/2 Daly's first-order form falls again (to 0 at C = 2 M), hence Young there.
/// scripts/scaling_study.py's checkpoint_interval_s is the same formula. Throws UsageError for a
/// non-positive cost or MTBF.
double checkpoint_interval_s(double cost_s, double mtbf_s);

/// Why a checkpoint is written (its "reason" in metrics.jsonl: to_string).
enum class CheckpointReason {
  young_daly_measure,  ///< the first boundary with checkpoint.mtbf_minutes: measures the cost C
  young_daly,          ///< the Young/Daly interval from C and the MTBF is due
  every_minutes,       ///< checkpoint.every_minutes is due
  every_steps,         ///< the step is a multiple of checkpoint.every_steps
  signal,              ///< a stop signal: the checkpoint before exit 75
  budget,              ///< a run.max_* budget would be crossed: the checkpoint before exit 3
  slow_rank,           ///< watchdog.slow_rank_stop_windows: the checkpoint before exit 4
  final,               ///< the end of training
};
/// The reason's name: "young_daly_measure", "young_daly", "every_minutes", "every_steps", "signal",
/// "budget", "slow_rank", "final".
const char* to_string(CheckpointReason r);

/// The periodic-checkpoint timing rules of one run.
class CheckpointSchedule {
 public:
  using Clock = std::chrono::steady_clock;

  /// `every_steps` (<= 0: off), `every_minutes` (<= 0: off), `mtbf_minutes` (<= 0: no Young/Daly;
  /// > 0 overrides every_minutes once the first cost is measured). `start` is the time the run began,
  /// from which the first interval counts.
  CheckpointSchedule(int64_t every_steps, double every_minutes, double mtbf_minutes, Clock::time_point start);

  /// True when a time-based interval is set and at least that long has passed since the last save
  /// (or since `start`). Asked on rank 0 only; the ranks then agree on the answer.
  bool time_due(Clock::time_point now) const;

  /// The reason to checkpoint after `step`, given the agreed `time_due` answer, or nullopt for no
  /// checkpoint. The Young/Daly measuring checkpoint is taken once: the call that returns
  /// young_daly_measure consumes it. Call only at boundaries that may checkpoint (not after the last
  /// step, not when `step` is already saved).
  std::optional<CheckpointReason> decide(int64_t step, bool time_due);

  /// Records that a checkpoint was taken at `now` (the next interval counts from here).
  void mark_saved(Clock::time_point now) { last_save_ = now; }

  /// A change of the Young/Daly interval worth announcing (first value, or a change above 20 %).
  struct IntervalChange {
    double cost_s = 0;      ///< running mean of measured checkpoint costs, seconds
    double interval_s = 0;  ///< new interval checkpoint_interval_s(cost_s, MTBF), seconds
  };
  /// Feeds the measured cost of one completed checkpoint (copy + stall + write, seconds). Without
  /// Young/Daly it does nothing. Returns the new interval when it should be announced. Throws
  /// UsageError for a non-positive cost (checkpoint_interval_s).
  std::optional<IntervalChange> record_cost(double cost_s);

  /// The time-based interval in seconds (every_minutes or Young/Daly); 0 when none.
  double interval_s() const { return interval_s_; }
  /// The running mean of measured checkpoint costs in seconds (0 before the first).
  double cost_s() const { return cost_s_; }
  double mtbf_minutes() const { return mtbf_minutes_; }

 private:
  int64_t every_steps_;
  double mtbf_minutes_;
  double interval_s_ = 0;      // time-based interval (every_minutes or Young/Daly); 0 = none
  bool need_measure_ = false;  // Young/Daly: checkpoint once early to measure the cost
  double cost_s_ = 0;
  Clock::time_point last_save_;
};

}  // namespace ht
