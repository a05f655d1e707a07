// The Trainer's checkpoint state: host copies of its tensors, capture_state (collective: every rank's
// running statistics gathered, and their average) and restore_state (resume: each rank's own running
// statistics at the same world size, the average otherwise; or --init-from with an optional head
// reset). The checkpoint manager (src/train/checkpoint_manager.cpp) moves the state to files and ranks.
#include <algorithm>
#include <cstdio>
#include <span>

#include "base/hash.hpp"

#include "src/train/config.hpp"
#include "src/train/sgd.hpp"
#include "src/train/trainer.hpp"

#include <cmath>
#include "io/checkpoint/checkpoint_format.hpp"
#include "src/train/training_state.hpp"

namespace ht {
void Trainer::for_each_state_tensor(const std::function<void(const std::string& name, Tensor view)>& visit) {
  auto& ps = model_->params();
  for (const auto& p : ps.params()) visit(state_tensor_name(StateGroup::param, p.name), *p.value);
  for (const auto& b : ps.buffers()) visit(state_tensor_name(StateGroup::buffer, b.name), *b.value);
  Tensor& mom = opt_->momentum_buffer();
  for (const auto& p : ps.params())
    visit(state_tensor_name(StateGroup::momentum, p.name), mom.slice_flat(p.offset, p.shape));
}

std::vector<std::pair<std::string, Tensor>> Trainer::state_tensors() {
  std::vector<std::pair<std::string, Tensor>> out;
  for_each_state_tensor([&out](const std::string& name, Tensor t) { out.emplace_back(name, t.to(Device::cpu)); });
  return out;
}

std::vector<std::pair<std::string, std::vector<int64_t>>> Trainer::state_tensor_shapes() {
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  for_each_state_tensor([&out](const std::string& name, Tensor t) { out.emplace_back(name, t.shape()); });
  return out;
}

std::vector<std::string> Trainer::head_param_names() const {
  std::vector<std::string> names;
  std::vector<int> ndims;
  for (const auto& p : model_->params().params()) {
    names.push_back(p.name);
    ndims.push_back(static_cast<int>(p.shape.size()));
  }
  return ht::head_param_names(names, ndims);
}

void Trainer::load_state_tensors(const std::vector<std::pair<std::string, Tensor>>& tensors, bool params_only,
                                 const std::vector<std::string>& skip) {
  auto find = [&](const std::string& name) -> const Tensor* {
    for (const auto& [n, t] : tensors)
      if (n == name) return &t;
    return nullptr;
  };
  for_each_state_tensor([&](const std::string& name, Tensor dst) {
    StateGroup group;
    std::string own;
    parse_state_tensor_name(name, &group, &own);
    if (params_only && group == StateGroup::momentum) return;
    if (group == StateGroup::param && std::find(skip.begin(), skip.end(), own) != skip.end()) return;
    const Tensor* src = find(name);
    if (!src) throw UsageError("checkpoint has no tensor '" + name + "' for model " + cfg_.model.name);
    if (src->shape() != dst.shape())
      throw UsageError("checkpoint tensor '" + name + "' has shape " + src->shape_str() + ", model " + cfg_.model.name +
                       " needs " + dst.shape_str());
    dst.copy_from(*src);
  });
}

TrainingState Trainer::capture_state() {
  TrainingState s;
  auto& ps = model_->params();
  if (rank_ == 0) s.tensors = state_tensors();
  // BatchNorm running statistics differ per rank (each saw its own samples). Rank 0 gathers every
  // rank's own values (kept as rank_buffer/<r>/<name>, restored rank by rank on a resume at this
  // world size) and saves their average as buffer/<name> (export, --init-from, another world size).
  // The gather is one reduce_sum over world_size slots: rank r fills slot r with its buffers and the
  // other slots with -0.0f, the additive identity of IEEE 754 (x + -0 == x bit for bit for every x,
  // +0, -0, infinities and NaNs included), so rank 0 receives every rank's bytes unchanged in any
  // summation order.
  Tensor& fb = ps.flat_buffers();
  if (world_ > 1 && fb.defined() && fb.numel() > 0) {
    const int64_t nb = fb.numel();
    Tensor host = Tensor::empty({int64_t{world_} * nb}, DType::f32, Device::cpu);
    std::fill_n(host.data<float>(), host.numel(), -0.0f);
    host.slice_flat(int64_t{rank_} * nb, {nb}).copy_from(fb);
    Tensor all = host;
    if (comm_->device() != Device::cpu) {
      all = Tensor::empty(host.shape(), DType::f32, comm_->device());
      all.copy_from(host);
    }
    comm_->reduce_sum(std::span<float>(all.data<float>(), static_cast<size_t>(all.numel())), 0);
    if (rank_ == 0) {
      if (comm_->device() != Device::cpu) host = all.to(Device::cpu);
      const float* ranks = host.data<float>();
      for (const auto& b : ps.buffers()) {
        Tensor* avg = nullptr;
        for (auto& [n, t] : s.tensors)
          if (n == state_tensor_name(StateGroup::buffer, b.name)) avg = &t;
        if (!avg) continue;
        float* o = avg->data<float>();
        for (int64_t i = 0; i < avg->numel(); ++i) {
          float sum = 0.f;  // in rank order: the same average on every run
          for (int r = 0; r < world_; ++r) sum += ranks[int64_t{r} * nb + b.offset + i];
          o[i] = sum / static_cast<float>(world_);
        }
      }
      for (int r = 0; r < world_; ++r)
        for (const auto& b : ps.buffers()) {
          Tensor own = Tensor::empty(b.shape, DType::f32, Device::cpu);
          std::copy_n(ranks + int64_t{r} * nb + b.offset, own.numel(), own.data<float>());
          s.tensors.emplace_back(rank_buffer_name(r, b.name), std::move(own));
        }
    }
  }
  s.progress = prog_;
  s.world_size = world_;
  s.seed = cfg_.run.seed;
  s.global_batch = cfg_.train.global_batch;
  s.total_steps = total_steps_;
  s.steps_per_epoch = steps_per_epoch_;
  s.lr = learning_rate(cfg_.optim, prog_.step, total_steps_, steps_per_epoch_);
  if (scaler_) s.loss_scale = scaler_->state();
  if (std::isfinite(summary_.last_loss) && prog_.step > 0) s.train_loss = summary_.last_loss;
  if (summary_.test_top1 >= 0) {
    s.test_top1 = summary_.test_top1;
    s.test_loss = summary_.test_loss;
  }
  s.model = cfg_.model.name;
  s.config = to_ini(cfg_);
  s.config_hash = hex64(fnv1a(s.config));
  return s;
}

std::vector<std::string> Trainer::restore_state(const TrainingState& s, RestoreScope scope) {
  if (scope == RestoreScope::full) {
    load_state_tensors(s.tensors, false);  // buffers: the average over the saved ranks
    if (world_ > 1 && s.world_size == world_ && has_rank_buffers(s)) {
      // The same world size: this rank's own running statistics, as it had them at the save.
      for (const auto& b : model_->params().buffers()) {
        const std::string name = rank_buffer_name(rank_, b.name);
        const Tensor* src = s.find(name);
        if (!src) throw UsageError("checkpoint has no tensor '" + name + "' for model " + cfg_.model.name);
        if (src->shape() != b.value->shape())
          throw UsageError("checkpoint tensor '" + name + "' has shape " + src->shape_str() + ", model " +
                           cfg_.model.name + " needs " + b.value->shape_str());
        b.value->copy_from(*src);
      }
    }
    prog_ = s.progress;  // epoch_offset restated below for this run's epoch length
    // How the run was doing: the next save and run_end carry it on until this start measures anew.
    if (s.train_loss) summary_.last_loss = *s.train_loss;
    if (s.test_top1) {
      summary_.test_top1 = *s.test_top1;
      summary_.test_loss = s.test_loss.value_or(0);
    }
    // The scale and its clean-step count, bit for bit; a checkpoint without them (an earlier build,
    // a run without loss scaling) leaves the scaler at train.loss_scale.initial.
    if (scaler_ && s.loss_scale) scaler_->restore(*s.loss_scale);
    // steps done = epoch x steps_per_epoch + step_in_epoch + epoch_offset (checked by the reader for
    // the saved epoch length), restated for this run's epoch length: unchanged when the length is the
    // same; after a changed one the current epoch ends at this run's length, or at once when the
    // cursor is already past it (no step runs, so no checkpoint sees the cursor beyond the end).
    const TrainProgress& p = s.progress;
    const int64_t done = p.step + p.nonfinite_total;
    prog_.epoch_offset = done - p.step_in_epoch - int64_t{p.epoch} * steps_per_epoch_ +
                         std::max<int64_t>(0, p.step_in_epoch - steps_per_epoch_);
    return {};
  }
  std::vector<std::string> skip;
  if (scope == RestoreScope::params_reset_head) skip = head_param_names();
  load_state_tensors(s.tensors, true, skip);
  return skip;
}

}  // namespace ht
