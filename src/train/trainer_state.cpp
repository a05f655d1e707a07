// The Trainer's checkpoint state: host copies of its tensors, capture_state (collective: running
// statistics averaged over ranks) and restore_state (resume, or --init-from with an optional head
// reset). The checkpoint manager (src/train/checkpoint_manager.cpp) moves the state to files and ranks.
#include <algorithm>
#include <cstdio>
#include <span>

#include "src/base/hash.hpp"

#include "src/train/config.hpp"
#include "src/train/sgd.hpp"
#include "src/train/trainer.hpp"
#include "src/train/training_state.hpp"

namespace ht {
std::vector<std::pair<std::string, Tensor>> Trainer::state_tensors() {
  std::vector<std::pair<std::string, Tensor>> out;
  auto& ps = model_->params();
  for (const auto& p : ps.params()) out.emplace_back("param/" + p.name, p.value->to(Device::cpu));
  for (const auto& b : ps.buffers()) out.emplace_back("buffer/" + b.name, b.value->to(Device::cpu));
  Tensor& mom = opt_->momentum_buffer();
  for (const auto& p : ps.params())
    out.emplace_back("momentum/" + p.name, mom.slice_flat(p.offset, p.shape).to(Device::cpu));
  return out;
}

void Trainer::load_state_tensors(const std::vector<std::pair<std::string, Tensor>>& tensors, bool params_only,
                                 const std::vector<std::string>& skip) {
  auto& ps = model_->params();
  auto find = [&](const std::string& name) -> const Tensor* {
    for (const auto& [n, t] : tensors)
      if (n == name) return &t;
    return nullptr;
  };
  auto load = [&](const std::string& name, Tensor dst) {
    const Tensor* src = find(name);
    if (!src) throw UsageError("checkpoint has no tensor '" + name + "' for model " + cfg_.model.name);
    if (src->shape() != dst.shape())
      throw UsageError("checkpoint tensor '" + name + "' has shape " + src->shape_str() + ", model " + cfg_.model.name +
                       " needs " + dst.shape_str());
    dst.copy_from(*src);
  };
  auto skipped = [&](const std::string& n) { return std::find(skip.begin(), skip.end(), n) != skip.end(); };
  for (const auto& p : ps.params())
    if (!skipped(p.name)) load("param/" + p.name, *p.value);
  for (const auto& b : ps.buffers()) load("buffer/" + b.name, *b.value);
  if (params_only) return;
  Tensor& mom = opt_->momentum_buffer();
  for (const auto& p : ps.params()) load("momentum/" + p.name, mom.slice_flat(p.offset, p.shape));
}

TrainingState Trainer::capture_state() {
  TrainingState s;
  auto& ps = model_->params();
  if (rank_ == 0) s.tensors = state_tensors();
  // BatchNorm running statistics differ per rank (each saw its own samples): save their average,
  // the sum over ranks (at rank 0) divided by world_size.
  Tensor& fb = ps.flat_buffers();
  if (world_ > 1 && fb.defined() && fb.numel() > 0) {
    Tensor sum = Tensor::empty(fb.shape(), DType::f32, comm_->device());
    sum.copy_from(fb);
    comm_->reduce_sum(std::span<float>(sum.data<float>(), static_cast<size_t>(sum.numel())), 0);
    if (rank_ == 0) {
      const Tensor host = sum.to(Device::cpu);
      const float* total = host.data<float>();
      for (const auto& b : ps.buffers()) {
        Tensor* dst = nullptr;
        for (auto& [n, t] : s.tensors)
          if (n == "buffer/" + b.name) dst = &t;
        if (!dst) continue;
        float* o = dst->data<float>();
        for (int64_t i = 0; i < dst->numel(); ++i) o[i] = total[b.offset + i] / static_cast<float>(world_);
      }
    }
  }
  s.step = prog_.step;
  s.epoch = prog_.epoch;
  s.step_in_epoch = prog_.step_in_epoch;
  s.nonfinite_in_row = prog_.nonfinite_in_row;
  s.nonfinite_total = prog_.nonfinite_total;
  s.world_size = world_;
  s.seed = cfg_.run.seed;
  s.global_batch = cfg_.train.global_batch;
  s.total_steps = total_steps_;
  s.steps_per_epoch = steps_per_epoch_;
  s.lr = learning_rate(cfg_.optim, prog_.step, total_steps_, steps_per_epoch_);
  s.loss_scale = 1.0;
  s.model = cfg_.model.name;
  s.config = to_ini(cfg_);
  s.config_hash = hex64(fnv1a(s.config));
  return s;
}

std::vector<std::string> Trainer::restore_state(const TrainingState& s, RestoreScope scope) {
  if (scope == RestoreScope::full) {
    load_state_tensors(s.tensors, false);
    prog_.step = s.step;
    prog_.epoch = s.epoch;
    prog_.step_in_epoch = s.step_in_epoch;
    prog_.nonfinite_in_row = s.nonfinite_in_row;
    prog_.nonfinite_total = s.nonfinite_total;
    return {};
  }
  std::vector<std::string> skip;
  if (scope == RestoreScope::params_reset_head) {
    std::vector<std::string> names;
    std::vector<int> ndims;
    for (const auto& p : model_->params().params()) {
      names.push_back(p.name);
      ndims.push_back(static_cast<int>(p.shape.size()));
    }
    skip = head_param_names(names, ndims);
  }
  load_state_tensors(s.tensors, true, skip);
  return skip;
}

}  // namespace ht
