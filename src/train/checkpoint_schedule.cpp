// Periodic-checkpoint timing: every_steps, every_minutes and the Young/Daly interval.
#include "src/train/checkpoint_schedule.hpp"

#include <cmath>
#include <string>

#include "base/error.hpp"
#include "base/enum_names.hpp"

namespace ht {

const char* to_string(CheckpointReason r) {
  using R = CheckpointReason;
  static constexpr std::pair<R, const char*> kNames[] = {
      {R::young_daly_measure, "young_daly_measure"}, {R::young_daly, "young_daly"}, {R::every_minutes, "every_minutes"},
      {R::every_steps, "every_steps"}, {R::signal, "signal"}, {R::budget, "budget"}, {R::slow_rank, "slow_rank"},
      {R::final, "final"}};
  return enum_name(r, kNames);
}

double checkpoint_interval_s(double cost_s, double mtbf_s) {
  if (!(cost_s > 0) || !(mtbf_s > 0))
    throw UsageError("Young/Daly interval needs a positive checkpoint cost and MTBF (got C = " +
                     std::to_string(cost_s) + " s, M = " + std::to_string(mtbf_s) + " s)");
  const double young = std::sqrt(2.0 * cost_s * mtbf_s);
  return cost_s < 0.5 * mtbf_s ? young - cost_s : young;
}

CheckpointSchedule::CheckpointSchedule(int64_t every_steps, double every_minutes, double mtbf_minutes,
                                       Clock::time_point start)
    : every_steps_(every_steps), mtbf_minutes_(mtbf_minutes), last_save_(start) {
  if (every_minutes > 0) interval_s_ = every_minutes * 60;
  if (mtbf_minutes > 0) need_measure_ = true;
}

bool CheckpointSchedule::time_due(Clock::time_point now) const {
  return interval_s_ > 0 && std::chrono::duration<double>(now - last_save_).count() >= interval_s_;
}

std::optional<CheckpointReason> CheckpointSchedule::decide(int64_t step, bool time_due) {
  if (need_measure_) {
    need_measure_ = false;
    return CheckpointReason::young_daly_measure;
  }
  if (time_due) return mtbf_minutes_ > 0 ? CheckpointReason::young_daly : CheckpointReason::every_minutes;
  if (every_steps_ > 0 && step % every_steps_ == 0) return CheckpointReason::every_steps;
  return std::nullopt;
}

std::optional<CheckpointSchedule::IntervalChange> CheckpointSchedule::record_cost(double cost_s) {
  if (mtbf_minutes_ <= 0) return std::nullopt;
  const double old = interval_s_;
  cost_s_ = cost_s_ > 0 ? 0.5 * (cost_s_ + cost_s) : cost_s;
  interval_s_ = checkpoint_interval_s(cost_s_, mtbf_minutes_ * 60);
  if (old <= 0 || std::fabs(interval_s_ - old) > 0.2 * old) return IntervalChange{cost_s_, interval_s_};
  return std::nullopt;
}

}  // namespace ht
