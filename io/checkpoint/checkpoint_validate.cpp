// The validation every checkpoint reader shares (io/checkpoint/checkpoint_format.hpp): the tensor index, the
// per-rank buffers and the progress counters, on the layout alone (no tensor data), so that resume,
// --init-from and `hpctrain inspect` reach the same verdict on every file.
#include <cmath>
#include <filesystem>
#include <set>

#include "io/checkpoint/checkpoint_format.hpp"
#include "io/checkpoint/checkpoint_store.hpp"

namespace ht {
namespace {

std::string shape_text(const std::vector<int64_t>& s) {
  std::string o = "[";
  for (size_t i = 0; i < s.size(); ++i) o += (i ? ", " : "") + std::to_string(s[i]);
  return o + "]";
}

// a + b, a * b with overflow reported as false (the counters are untrusted int64).
bool add_ok(int64_t a, int64_t b, int64_t* r) { return !__builtin_add_overflow(a, b, r); }
bool mul_ok(int64_t a, int64_t b, int64_t* r) { return !__builtin_mul_overflow(a, b, r); }

}  // namespace

const CheckpointTensorInfo* CheckpointLayout::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

CheckpointLayout checkpoint_layout_of(const CheckpointData& d) {
  CheckpointLayout l;
  l.version = d.version;
  for (const auto& [n, t] : d.tensors) l.tensors.push_back({n, t.shape()});
  l.ints = d.ints;
  l.floats = d.floats;
  l.strings = d.strings;
  return l;
}

std::string rank_buffer_problem(const CheckpointData& d, int64_t version) {
  return rank_buffer_problem(checkpoint_layout_of(d), version);
}

std::string rank_buffer_problem(const CheckpointLayout& l, int64_t version) {
  std::map<std::string, std::vector<int64_t>> buffers;  // buffer name -> shape
  std::map<int64_t, std::map<std::string, std::vector<int64_t>>> ranks;
  std::string first;  // the first per-rank buffer, for messages
  const std::string g = std::string(kRankBufferGroup) + "/";
  for (const auto& [n, shape] : l.tensors) {
    StateGroup group;
    std::string name;
    if (parse_state_tensor_name(n, &group, &name) && group == StateGroup::buffer) buffers[name] = shape;
    if (!is_rank_buffer_name(n)) continue;
    if (first.empty()) first = n;
    const size_t slash = n.find('/', g.size());
    const std::string r = n.substr(g.size(), slash == std::string::npos ? std::string::npos : slash - g.size());
    const bool digits = !r.empty() && r.size() <= 9 && r.find_first_not_of("0123456789") == std::string::npos &&
                        (r == "0" || r[0] != '0');
    if (slash == std::string::npos || slash + 1 == n.size() || !digits)
      return "dataset /" + n + " is not named " + g + "<rank>/<buffer name>";
    ranks[std::stoll(r)][n.substr(slash + 1)] = shape;
  }
  if (version < 2) return first.empty() ? "" : "dataset /" + first + " in a version " + std::to_string(version) +
                                                   " file (per-rank buffers are version 2)";
  if (first.empty()) return "version 2 file without per-rank buffers (/" + g + "<rank>/...)";
  auto ws = l.ints.find("world_size");
  if (ws == l.ints.end()) return "dataset /ints/world_size is missing (a version 2 file needs it)";
  if (ws->second < 2) return "ints/world_size = " + std::to_string(ws->second) + " with per-rank buffers";
  for (const auto& [rank, names] : ranks) {
    if (rank >= ws->second)
      return "dataset /" + rank_buffer_name(rank, names.begin()->first) + ": rank " + std::to_string(rank) +
             " is outside world_size " + std::to_string(ws->second);
    for (const auto& [name, shape] : names) {
      auto b = buffers.find(name);
      if (b == buffers.end()) return "dataset /" + rank_buffer_name(rank, name) + " has no /buffer/" + name;
      if (b->second != shape)
        return "dataset /" + rank_buffer_name(rank, name) + " has shape " + shape_text(shape) + ", /buffer/" + name +
               " has " + shape_text(b->second);
    }
    for (const auto& [name, shape] : buffers)
      if (!names.count(name)) return "dataset /" + rank_buffer_name(rank, name) + " is missing";
  }
  if (static_cast<int64_t>(ranks.size()) != ws->second) {
    int64_t missing = 0;
    while (ranks.count(missing)) ++missing;
    return "group /" + g + std::to_string(missing) + " is missing (world_size " + std::to_string(ws->second) +
           " needs ranks 0 to " + std::to_string(ws->second - 1) + ")";
  }
  return "";
}

std::string checkpoint_counters_problem(const CheckpointLayout& l) {
  auto has = [&](const char* k) { return l.ints.count(k) > 0; };
  auto v = [&](const char* k) { return l.ints.at(k); };
  auto bad = [&](const char* k, const std::string& why) {
    return "ints/" + std::string(k) + " = " + std::to_string(v(k)) + " " + why;
  };
  auto range = [&](const char* k, int64_t lo, int64_t hi) -> std::string {
    if (!has(k) || (v(k) >= lo && v(k) <= hi)) return "";
    return bad(k, "is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  };
  for (const auto& [k, lo, hi] : kCheckpointResumeInts)
    if (std::string p = range(k, lo, hi); !p.empty()) return p;
  if (has("step_in_epoch") && has("steps_per_epoch") && v("step_in_epoch") > v("steps_per_epoch"))
    return bad("step_in_epoch", "is beyond ints/steps_per_epoch = " + std::to_string(v("steps_per_epoch")));
  if (has("step") && has("total_steps") && v("step") > v("total_steps"))
    return bad("step", "is beyond ints/total_steps = " + std::to_string(v("total_steps")));
  if (has("nonfinite_in_row") && has("nonfinite_total") && v("nonfinite_in_row") > v("nonfinite_total"))
    return bad("nonfinite_in_row", "is more than ints/nonfinite_total = " + std::to_string(v("nonfinite_total")));
  if (has("world_size") && has("global_batch") && v("world_size") > 0 && v("global_batch") % v("world_size") != 0)
    return bad("global_batch", "is not a multiple of ints/world_size = " + std::to_string(v("world_size")));
  // Epoch and cursor against the step: every step of the run (applied or skipped) was taken in some
  // epoch, so steps done = epoch x steps_per_epoch + step_in_epoch + epoch_offset, where epoch_offset
  // is 0 unless a resume changed the length of an epoch (docs/checkpoint.md).
  if (has("step") && has("epoch") && has("step_in_epoch") && has("nonfinite_total")) {
    int64_t done = 0;
    if (!add_ok(v("step"), v("nonfinite_total"), &done))
      return bad("nonfinite_total", "with ints/step = " + std::to_string(v("step")) + " overflows");
    const std::string facts = "ints/step = " + std::to_string(v("step")) + ", nonfinite_total = " +
                              std::to_string(v("nonfinite_total")) + ", epoch = " + std::to_string(v("epoch")) +
                              ", step_in_epoch = " + std::to_string(v("step_in_epoch"));
    if (has("epoch_offset") && has("steps_per_epoch")) {
      int64_t expect = 0;
      if (!mul_ok(v("epoch"), v("steps_per_epoch"), &expect) || !add_ok(expect, v("step_in_epoch"), &expect) ||
          !add_ok(expect, v("epoch_offset"), &expect) || expect != done)
        return "progress counters disagree: " + facts + ", steps_per_epoch = " + std::to_string(v("steps_per_epoch")) +
               ", epoch_offset = " + std::to_string(v("epoch_offset")) +
               " (steps done, step + nonfinite_total, must equal epoch x steps_per_epoch + step_in_epoch + epoch_offset)";
    } else if (v("epoch") > done - v("step_in_epoch")) {
      return "progress counters disagree: " + facts +
             " (each completed epoch and each step of this one counts in step + nonfinite_total)";
    }
  }
  if (auto it = l.floats.find("lr"); it != l.floats.end() && !(std::isfinite(it->second) && it->second >= 0))
    return "floats/lr = " + std::to_string(it->second) + " is not a finite learning rate >= 0";
  if (auto it = l.floats.find("train_loss"); it != l.floats.end() && !std::isfinite(it->second))
    return "floats/train_loss = " + std::to_string(it->second) + " is not finite";
  if (auto it = l.floats.find("test_top1"); it != l.floats.end() && !(it->second >= 0 && it->second <= 1))
    return "floats/test_top1 = " + std::to_string(it->second) + " is outside [0, 1]";
  if (auto it = l.floats.find("test_loss"); it != l.floats.end() && !(std::isfinite(it->second) && it->second >= 0))
    return "floats/test_loss = " + std::to_string(it->second) + " is not finite and >= 0";
  if (auto it = l.floats.find("loss_scale"); it != l.floats.end() && !(std::isfinite(it->second) && it->second > 0))
    return "floats/loss_scale = " + std::to_string(it->second) + " is not finite and > 0";
  // Written by runs with loss scaling (src/train/loss_scaler.hpp): the scale is then a power of two.
  if (auto it = l.ints.find("loss_scale_clean_steps"); it != l.ints.end()) {
    if (it->second < 0) return "ints/loss_scale_clean_steps = " + std::to_string(it->second) + " is negative";
    const auto sc = l.floats.find("loss_scale");
    int e = 0;
    if (sc == l.floats.end()) return "dataset /floats/loss_scale is missing (ints/loss_scale_clean_steps is present)";
    if (std::frexp(sc->second, &e) != 0.5)
      return "floats/loss_scale = " + std::to_string(sc->second) + " is not a power of two (ints/loss_scale_clean_steps is present)";
  }
  return "";
}

std::string checkpoint_layout_problem(const CheckpointLayout& l, const std::string& filename) {
  std::set<std::string> seen;
  for (const auto& t : l.tensors) {
    if (!seen.insert(t.name).second) return "/meta/tensor_names lists /" + t.name + " twice";
    if (!parse_state_tensor_name(t.name, nullptr, nullptr) && !is_rank_buffer_name(t.name))
      return "/meta/tensor_names lists /" + t.name + ", outside param/, buffer/, momentum/ and rank_buffer/";
  }
  if (!l.ints.count("step")) return "dataset /ints/step is missing";
  const int64_t named = checkpoint_step_from_name(std::filesystem::path(filename).filename().string());
  if (named >= 0 && l.ints.at("step") != named)
    return "ints/step = " + std::to_string(l.ints.at("step")) + " does not match the file name (step " +
           std::to_string(named) + ")";
  // A run directory's checkpoint (resumed automatically) must carry everything a resume needs, so
  // that inspect and resume agree on it; other files (--init-from, scripts/import_torch.py) need not.
  if (named >= 0)
    for (const CheckpointResumeInt& r : kCheckpointResumeInts)
      if (!l.ints.count(r.key)) return "dataset /ints/" + std::string(r.key) + " is missing (a resume needs it)";
  // ... and its momentum pairs with its parameters (SGD keeps one per parameter, of its shape).
  if (named >= 0)
    for (const auto& t : l.tensors) {
      StateGroup group;
      std::string name;
      if (!parse_state_tensor_name(t.name, &group, &name) || group == StateGroup::buffer) continue;
      const std::string other =
          state_tensor_name(group == StateGroup::param ? StateGroup::momentum : StateGroup::param, name);
      const CheckpointTensorInfo* o = l.find(other);
      if (!o) return "dataset /" + other + " is missing (/" + t.name + " has shape " + shape_text(t.shape) + ")";
      if (o->shape != t.shape)
        return "dataset /" + other + " has shape " + shape_text(o->shape) + ", /" + t.name + " has " + shape_text(t.shape);
    }
  if (std::string p = rank_buffer_problem(l, l.version); !p.empty()) return p;
  return checkpoint_counters_problem(l);
}

}  // namespace ht
