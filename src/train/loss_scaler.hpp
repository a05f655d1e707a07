#pragma once
// Dynamic loss scaling (Micikevicius et al., "Mixed Precision Training", ICLR 2018; PyTorch's
// torch.cuda.amp.GradScaler): the loss is multiplied by the scale before backward, so that small
// fp16 gradients do not flush to zero, and the gradients are divided by it again before the
// optimizer. A step whose gradients overflowed (not finite on some rank: the ranks' agreement in
// Trainer::exchange_and_check) is skipped and the scale halved; after growth_interval clean steps in
// a row the scale doubles. Scales are powers of two, so scaling and unscaling are exact in floating
// point (barring underflow and overflow) and the fp32 path with scaling reproduces the unscaled one.
//
// The state (scale, clean steps) is typed and moves through checkpoints on its own
// (to_checkpoint / from_checkpoint below): floats/loss_scale and ints/loss_scale_clean_steps.
#include <cstdint>
#include <string>

namespace ht {

struct CheckpointData;

/// train.loss_scale.* (docs/config.md). Every scale is a power of two.
struct LossScaleConfig {
  bool enabled = false;          ///< scale the loss (always on with train.precision = fp16)
  double initial = 65536;        ///< the first scale
  int64_t growth_interval = 2000;  ///< clean steps in a row before the scale doubles
  double min = 1;                ///< the scale never goes below this (a back-off at min keeps min)
  double max = 16777216;         ///< ... nor above this (2^24)
};

/// Problem with `c` as text ("" when valid): initial, min and max positive finite powers of two with
/// min <= initial <= max, growth_interval >= 1. The text names the key (train.loss_scale.<key>).
std::string loss_scale_config_problem(const LossScaleConfig& c);

/// What a checkpoint carries of the scaler. Both fields are bit-exact in the file (float64, int64).
struct LossScaleState {
  double scale = 1;          ///< the scale of the next step
  int64_t clean_steps = 0;   ///< applied steps since the last change of the scale

  bool operator==(const LossScaleState&) const = default;

  /// Writes floats/loss_scale and ints/loss_scale_clean_steps into `d`.
  void to_checkpoint(CheckpointData& d) const;
  /// The state in `d`, when `d` was written by a run with loss scaling (it has
  /// ints/loss_scale_clean_steps); otherwise false and `out` untouched (older files and runs without
  /// scaling hold only floats/loss_scale = 1, which must not replace the configured initial scale).
  static bool from_checkpoint(const CheckpointData& d, LossScaleState& out);
};

class LossScaler {
 public:
  /// Starts at c.initial. Throws UsageError (loss_scale_config_problem) when `c` is invalid.
  explicit LossScaler(const LossScaleConfig& c);

  /// The scale of the current step: the loss (in practice the loss gradient that seeds backward)
  /// is multiplied by it, the averaged gradients divided by it.
  double scale() const { return state_.scale; }
  /// 1 / scale() as float (exact: a power of two).
  float inverse() const { return static_cast<float>(1.0 / state_.scale); }

  /// After every rank agreed whether the step's gradients are finite: a clean step counts towards
  /// growth (the scale doubles, up to max, after growth_interval of them in a row); an overflowed
  /// one halves the scale (down to min) and resets the count. Returns true when the scale was backed
  /// off (false also for an overflow at min: nothing the scaler can do, a real non-finite step).
  bool update(bool overflow);

  const LossScaleState& state() const { return state_; }
  /// Restores a saved state (resume). Throws UsageError when the scale is not a positive finite
  /// power of two or clean_steps < 0.
  void restore(const LossScaleState& s);

 private:
  LossScaleConfig cfg_;
  LossScaleState state_;
};

}  // namespace ht
