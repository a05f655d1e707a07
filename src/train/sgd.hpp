#pragma once
// SGD with momentum, optional Nesterov and weight decay (the update itself is the op
// src/ops/sgd_update.hpp, PyTorch torch.optim.SGD semantics). Runs over the flat parameter buffer in per-parameter ranges, so weight decay can be
// skipped for biases and batch-norm parameters. Learning-rate schedules: constant, step, cosine,
// each with optional linear warm-up.
#include <cstdint>
#include <vector>

#include "src/train/config.hpp"
#include "base/tensor.hpp"
#include "src/nn/params.hpp"

namespace ht {

class Sgd {
 public:
  /// Momentum buffers (zeros) on the parameters' device.
  Sgd(ParamStore& ps, const Config::Optim& cfg);
  /// Applies one update with learning rate lr to every parameter from its gradient.
  void step(float lr);
  Tensor& momentum_buffer() { return buf_; }

 private:
  ParamStore* ps_;
  Config::Optim cfg_;
  Tensor buf_;
  struct Range { int64_t offset, count; bool decay; };
  std::vector<Range> ranges_;  // consecutive parameters with the same decay merged
};

/// The learning rate at `step` (0-based) of `total_steps`, with `steps_per_epoch` for the step
/// schedule. Warm-up: lr * (step+1)/warmup_steps for step < warmup_steps; then the schedule runs
/// over the remaining steps.
float learning_rate(const Config::Optim& o, int64_t step, int64_t total_steps, int64_t steps_per_epoch);

}  // namespace ht
