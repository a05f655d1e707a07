// Dynamic loss scaling (src/train/loss_scaler.hpp): the scaler's rules and its checkpoint fields.
#include "src/train/loss_scaler.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "io/checkpoint/checkpoint_format.hpp"
#include "base/error.hpp"

namespace ht {
namespace {

constexpr const char* kScaleKey = "loss_scale";               // floats/
constexpr const char* kCleanKey = "loss_scale_clean_steps";   // ints/

bool power_of_two(double v) {
  int e = 0;
  return std::isfinite(v) && v > 0 && std::frexp(v, &e) == 0.5;
}

std::string text(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

}  // namespace

std::string loss_scale_config_problem(const LossScaleConfig& c) {
  for (const auto& [key, v] : {std::pair{"initial", c.initial}, {"min", c.min}, {"max", c.max}})
    if (!power_of_two(v))
      return "train.loss_scale." + std::string(key) + " = " + text(v) +
             ": must be a positive power of two (so that scaling and unscaling are exact)";
  if (!(c.min <= c.initial && c.initial <= c.max))
    return "train.loss_scale.initial = " + text(c.initial) + ": must lie in [train.loss_scale.min, train.loss_scale.max] = [" +
           text(c.min) + ", " + text(c.max) + "]";
  if (c.growth_interval < 1)
    return "train.loss_scale.growth_interval = " + std::to_string(c.growth_interval) + ": must be >= 1";
  return "";
}

void LossScaleState::to_checkpoint(CheckpointData& d) const {
  d.floats[kScaleKey] = scale;
  d.ints[kCleanKey] = clean_steps;
}

bool LossScaleState::from_checkpoint(const CheckpointData& d, LossScaleState& out) {
  const auto clean = d.ints.find(kCleanKey);
  const auto scale = d.floats.find(kScaleKey);
  if (clean == d.ints.end() || scale == d.floats.end()) return false;
  out.scale = scale->second;
  out.clean_steps = clean->second;
  return true;
}

LossScaler::LossScaler(const LossScaleConfig& c) : cfg_(c) {
  if (const std::string p = loss_scale_config_problem(c); !p.empty()) throw UsageError(p);
  state_.scale = c.initial;
}

bool LossScaler::update(bool overflow) {
  if (overflow) {
    state_.clean_steps = 0;
    if (state_.scale <= cfg_.min) return false;
    state_.scale = std::max(cfg_.min, state_.scale / 2);
    return true;
  }
  if (++state_.clean_steps >= cfg_.growth_interval) {
    state_.clean_steps = 0;
    state_.scale = std::min(cfg_.max, state_.scale * 2);
  }
  return false;
}

void LossScaler::restore(const LossScaleState& s) {
  if (!power_of_two(s.scale) || s.clean_steps < 0)
    throw UsageError("loss scale state: scale = " + text(s.scale) + ", clean steps = " + std::to_string(s.clean_steps) +
                     ": the scale must be a positive power of two and the clean steps >= 0");
  state_ = s;
}

}  // namespace ht
