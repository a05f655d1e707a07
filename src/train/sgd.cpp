#include "src/train/sgd.hpp"

#include <cmath>

#include "src/ops/sgd_update.hpp"

namespace ht {


Sgd::Sgd(ParamStore& ps, const Config::Optim& cfg) : ps_(&ps), cfg_(cfg) {
  buf_ = Tensor::zeros({std::max<int64_t>(ps.num_params(), 1)}, DType::f32, ps.flat_values().device());
  for (const auto& p : ps.params()) {
    bool decay = cfg.wd_on_bias_bn || p.kind == ParamKind::conv_weight || p.kind == ParamKind::linear_weight;
    int64_t cnt = shape_numel(p.shape);
    if (!ranges_.empty() && ranges_.back().decay == decay && ranges_.back().offset + ranges_.back().count == p.offset)
      ranges_.back().count += cnt;
    else
      ranges_.push_back({p.offset, cnt, decay});
  }
}

void Sgd::step(float lr) {
  float* p = ps_->flat_values().data<float>();
  const float* g = ps_->flat_grads().data<float>();
  float* b = buf_.data<float>();
  const Device dev = ps_->flat_values().device();
  for (const auto& r : ranges_) {
    const float wd = r.decay ? cfg_.weight_decay : 0.f;
    sgd_update(dev, p + r.offset, g + r.offset, b + r.offset, r.count, lr, cfg_.momentum, wd, cfg_.nesterov);
  }
}

float learning_rate(const Config::Optim& o, int64_t step, int64_t total_steps, int64_t steps_per_epoch) {
  if (o.warmup_steps > 0 && step < o.warmup_steps)
    return o.lr * static_cast<float>(step + 1) / static_cast<float>(o.warmup_steps);
  const int64_t t = step - o.warmup_steps;
  const int64_t T = std::max<int64_t>(1, total_steps - o.warmup_steps);
  if (o.schedule == LrSchedule::cosine) {
    const double frac = std::min(1.0, static_cast<double>(t) / static_cast<double>(T));
    return static_cast<float>(o.min_lr + 0.5 * (o.lr - o.min_lr) * (1.0 + std::cos(M_PI * frac)));
  }
  if (o.schedule == LrSchedule::step) {
    const int64_t epoch = steps_per_epoch > 0 ? step / steps_per_epoch : 0;
    const int64_t k = o.step_epochs > 0 ? epoch / o.step_epochs : 0;
    return static_cast<float>(o.lr * std::pow(o.step_gamma, static_cast<double>(k)));
  }
  return o.lr;
}

}  // namespace ht
