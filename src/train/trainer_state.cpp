// The trainer's state as named host tensors, for checkpoints (src/train/resume.cpp): parameters,
// buffers and momentum by torchvision names.
#include <algorithm>

#include "src/train/trainer.hpp"

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

}  // namespace ht
