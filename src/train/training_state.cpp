// TrainingState <-> CheckpointData (the file format) and <-> bytes (the broadcast to other ranks).
#include "src/train/training_state.hpp"

#include <algorithm>
#include <cstring>

#include "base/error.hpp"

namespace ht {
namespace {

// ---- bytes: little helpers for one flat, native-byte-order message ----
class ByteWriter {
 public:
  explicit ByteWriter(size_t reserve) { b_.reserve(reserve); }
  void u64(uint64_t v) { raw(&v, 8); }
  void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
  void f64(double v) { raw(&v, 8); }
  void str(const std::string& s) {
    u64(s.size());
    raw(s.data(), s.size());
  }
  void raw(const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    b_.insert(b_.end(), c, c + n);
  }
  std::vector<char> take() { return std::move(b_); }

 private:
  std::vector<char> b_;
};

class ByteReader {
 public:
  explicit ByteReader(std::span<const char> b) : b_(b) {}
  uint64_t u64() {
    uint64_t v;
    raw(&v, 8);
    return v;
  }
  int64_t i64() { return static_cast<int64_t>(u64()); }
  double f64() {
    double v;
    raw(&v, 8);
    return v;
  }
  std::string str() {
    const uint64_t n = u64();
    need(n);
    std::string s(b_.data() + pos_, n);
    pos_ += n;
    return s;
  }
  void raw(void* dst, size_t n) {
    need(n);
    std::memcpy(dst, b_.data() + pos_, n);
    pos_ += n;
  }
  bool done() const { return pos_ == b_.size(); }

 private:
  void need(uint64_t n) const {
    if (n > b_.size() - pos_)
      throw RuntimeError("training state message: truncated (" + std::to_string(b_.size()) + " bytes, need " +
                         std::to_string(pos_ + n) + ")");
  }
  std::span<const char> b_;
  size_t pos_ = 0;
};

int64_t int_or(const CheckpointData& d, const char* key, int64_t fallback) {
  auto it = d.ints.find(key);
  return it == d.ints.end() ? fallback : it->second;
}
double float_or(const CheckpointData& d, const char* key, double fallback) {
  auto it = d.floats.find(key);
  return it == d.floats.end() ? fallback : it->second;
}
std::string string_or(const CheckpointData& d, const char* key, const std::string& fallback) {
  auto it = d.strings.find(key);
  return it == d.strings.end() ? fallback : it->second;
}

}  // namespace

const Tensor* TrainingState::find(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return &t;
  return nullptr;
}

bool has_rank_buffers(const TrainingState& s) {
  for (const auto& [n, t] : s.tensors)
    if (is_rank_buffer_name(n)) return true;
  return false;
}

CheckpointData to_checkpoint_data(TrainingState s) {
  CheckpointData d;
  d.tensors = std::move(s.tensors);
  d.ints = {{"step", s.step},
            {"epoch", s.epoch},
            {"step_in_epoch", s.step_in_epoch},
            {"world_size", s.world_size},
            {"seed", static_cast<int64_t>(s.seed)},
            {"global_batch", s.global_batch},
            {"total_steps", s.total_steps},
            {"steps_per_epoch", s.steps_per_epoch},
            {"nonfinite_in_row", s.nonfinite_in_row},
            {"nonfinite_total", s.nonfinite_total},
            {"epoch_offset", s.epoch_offset}};
  d.floats = {{"lr", s.lr}, {"loss_scale", 1.0}};
  if (s.train_loss) d.floats["train_loss"] = *s.train_loss;
  if (s.test_top1) d.floats["test_top1"] = *s.test_top1;
  if (s.test_loss) d.floats["test_loss"] = *s.test_loss;
  if (s.loss_scale) s.loss_scale->to_checkpoint(d);
  d.strings = {{"model", std::move(s.model)},
               {"config", std::move(s.config)},
               {"config_hash", std::move(s.config_hash)}};
  return d;
}

TrainingState training_state_from_checkpoint(CheckpointData d, const std::string& origin, bool require_progress) {
  TrainingState s;
  if (require_progress) {
    s.step = d.get_int("step", origin);
    s.epoch = static_cast<int>(d.get_int("epoch", origin));
    s.step_in_epoch = d.get_int("step_in_epoch", origin);
  } else {
    s.step = int_or(d, "step", 0);
    s.epoch = static_cast<int>(int_or(d, "epoch", 0));
    s.step_in_epoch = int_or(d, "step_in_epoch", 0);
  }
  s.nonfinite_in_row = int_or(d, "nonfinite_in_row", 0);
  s.nonfinite_total = int_or(d, "nonfinite_total", 0);
  s.epoch_offset = int_or(d, "epoch_offset", 0);
  s.world_size = int_or(d, "world_size", 0);
  s.seed = static_cast<uint64_t>(int_or(d, "seed", 0));
  s.global_batch = int_or(d, "global_batch", 0);
  s.total_steps = int_or(d, "total_steps", 0);
  s.steps_per_epoch = int_or(d, "steps_per_epoch", 0);
  s.lr = float_or(d, "lr", 0);
  for (auto [key, field] : {std::pair{"train_loss", &s.train_loss}, {"test_top1", &s.test_top1}, {"test_loss", &s.test_loss}})
    if (auto it = d.floats.find(key); it != d.floats.end()) *field = it->second;
  if (LossScaleState ls; LossScaleState::from_checkpoint(d, ls)) s.loss_scale = ls;
  s.model = string_or(d, "model", "?");
  s.config = string_or(d, "config", "");
  s.config_hash = string_or(d, "config_hash", "");
  s.tensors = std::move(d.tensors);
  return s;
}

std::vector<char> serialize_training_state(const TrainingState& s) {
  size_t payload = 0;
  for (const auto& [n, t] : s.tensors) payload += t.nbytes() + n.size() + 64;
  ByteWriter w(payload + s.config.size() + 4096);
  w.u64(s.tensors.size());
  for (const auto& [name, t] : s.tensors) {
    w.str(name);
    w.u64(static_cast<uint64_t>(t.dtype()));
    w.u64(t.shape().size());
    for (int64_t d : t.shape()) w.i64(d);
    w.raw(t.raw(), t.nbytes());  // host tensors (capture_state, read_checkpoint_file)
  }
  for (int64_t v : {s.step, static_cast<int64_t>(s.epoch), s.step_in_epoch, s.nonfinite_in_row, s.nonfinite_total,
                    s.world_size, static_cast<int64_t>(s.seed), s.global_batch, s.total_steps, s.steps_per_epoch,
                    s.epoch_offset})
    w.i64(v);
  w.f64(s.lr);
  w.u64(s.loss_scale ? 1 : 0);
  w.f64(s.loss_scale ? s.loss_scale->scale : 1.0);
  w.i64(s.loss_scale ? s.loss_scale->clean_steps : 0);
  for (const std::string* v : {&s.model, &s.config, &s.config_hash}) w.str(*v);
  return w.take();
}

TrainingState deserialize_training_state(std::span<const char> bytes) {
  TrainingState s;
  ByteReader r(bytes);
  const uint64_t n = r.u64();
  if (n > bytes.size()) throw RuntimeError("training state message: malformed tensor count " + std::to_string(n));
  s.tensors.reserve(n);
  for (uint64_t i = 0; i < n; ++i) {
    std::string name = r.str();
    const uint64_t dtype = r.u64();
    const uint64_t ndim = r.u64();
    if (dtype > static_cast<uint64_t>(DType::u8) || ndim > 64)
      throw RuntimeError("training state message: tensor '" + name + "' is malformed (dtype " +
                         std::to_string(dtype) + ", " + std::to_string(ndim) + " dimensions)");
    std::vector<int64_t> shape(ndim);
    for (auto& d : shape) d = r.i64();
    Tensor t = Tensor::empty(shape, static_cast<DType>(dtype));
    r.raw(t.raw(), t.nbytes());
    s.tensors.emplace_back(std::move(name), std::move(t));
  }
  s.step = r.i64();
  s.epoch = static_cast<int>(r.i64());
  s.step_in_epoch = r.i64();
  s.nonfinite_in_row = r.i64();
  s.nonfinite_total = r.i64();
  s.world_size = r.i64();
  s.seed = static_cast<uint64_t>(r.i64());
  s.global_batch = r.i64();
  s.total_steps = r.i64();
  s.steps_per_epoch = r.i64();
  s.epoch_offset = r.i64();
  s.lr = r.f64();
  const uint64_t has_scale = r.u64();
  LossScaleState ls;
  ls.scale = r.f64();
  ls.clean_steps = r.i64();
  if (has_scale) s.loss_scale = ls;
  s.model = r.str();
  s.config = r.str();
  s.config_hash = r.str();
  if (!r.done())
    throw RuntimeError("training state message: " + std::to_string(bytes.size()) + " bytes, trailing data");
  return s;
}

std::string checkpoint_run_problem(const CheckpointLayout& l, const std::string& path, const CheckpointExpectation& e) {
  auto str = [](const std::vector<int64_t>& sh) {
    std::string o = "[";
    for (size_t i = 0; i < sh.size(); ++i) o += (i ? ", " : "") + std::to_string(sh[i]);
    return o + "]";
  };
  auto in_group = [](const std::string& n) {
    return n.rfind("param/", 0) == 0 || n.rfind("buffer/", 0) == 0 || n.rfind("momentum/", 0) == 0;
  };
  if (e.resume) {
    const auto m = l.strings.find("model");
    const std::string model = m == l.strings.end() ? "?" : m->second;
    const auto gb = l.ints.find("global_batch");
    const int64_t global_batch = gb == l.ints.end() ? 0 : gb->second;
    if (!e.allow_config_change && (model != e.model || global_batch != e.global_batch))
      throw CheckpointRefusal("run.dir = " + e.run_dir + ": checkpoint " + path + " was saved with model.name = " + model +
                              ", train.global_batch = " + std::to_string(global_batch) + "; this config has model.name = " +
                              e.model + ", train.global_batch = " + std::to_string(e.global_batch) +
                              ". Pass --run.allow_config_change to resume anyway, or --run.fresh to start over");
    for (const char* k : kCheckpointResumeInts)
      if (!l.ints.count(k)) return "dataset /ints/" + std::string(k) + " is missing (a resume needs it)";
  }
  for (const auto& [name, shape] : e.tensors) {
    if (!e.resume && name.rfind("momentum/", 0) == 0) continue;
    const CheckpointTensorInfo* t = l.find(name);
    if (!t) return "dataset /" + name + " is missing (model " + e.model + " needs shape " + str(shape) + ")";
    const bool any = std::find(e.any_shape.begin(), e.any_shape.end(), name) != e.any_shape.end();
    if (!any && t->shape != shape) {
      const auto m = l.strings.find("model");
      const std::string holds = m == l.strings.end() ? "a model it does not name" : "model " + m->second;
      if (e.resume)
        return "dataset /" + name + " has shape " + str(t->shape) + " (the checkpoint holds " + holds + "), model " +
               e.model + " needs " + str(shape);
      // --init-from: a well-formed file made for another model or input is incompatible, not invalid;
      // say which way out fits the difference.
      std::string way_out = "check model.name, model.num_classes and the data's channels against the checkpoint";
      const bool same_rank = t->shape.size() == shape.size() && !shape.empty();
      if (same_rank && shape.size() == 4 && t->shape[0] == shape[0] && t->shape[2] == shape[2] &&
          t->shape[3] == shape[3] && t->shape[1] != shape[1])
        way_out = "it was made for " + std::to_string(t->shape[1]) + "-channel input and the data has " +
                  std::to_string(shape[1]) +
                  (t->shape[1] == 3 && shape[1] == 1
                       ? ": import the weights with scripts/import_torch.py --channels 1 (sums the filter over RGB)"
                       : ": use data with as many channels as the checkpoint's");
      else if (same_rank && shape.size() <= 2 && t->shape[0] != shape[0] &&
               (shape.size() == 1 || t->shape[1] == shape[1]))
        way_out = "a different class count: add --reset-head to start the last layer anew";
      throw CheckpointRefusal("--init-from " + path + " does not fit this run: /" + name + " is " + str(t->shape) +
                              " there (the checkpoint holds " + holds + "), model " + e.model + " here needs " +
                              str(shape) + "; " + way_out);
    }
  }
  if (e.resume)
    for (const auto& t : l.tensors) {
      if (!in_group(t.name)) continue;
      bool known = false;
      for (const auto& [name, shape] : e.tensors) known = known || name == t.name;
      if (!known) return "dataset /" + t.name + " (shape " + str(t.shape) + ") is not a tensor of model " + e.model;
    }
  return "";
}

std::vector<std::string> head_param_names(const std::vector<std::string>& names, const std::vector<int>& ndims) {
  for (size_t i = names.size(); i-- > 0;) {
    const std::string& n = names[i];
    if (ndims[i] == 2 && n.size() > 7 && n.substr(n.size() - 7) == ".weight") {
      std::string bias = n.substr(0, n.size() - 7) + ".bias";
      std::vector<std::string> out{n};
      for (const auto& m : names)
        if (m == bias) out.push_back(bias);
      return out;
    }
  }
  return {};
}

}  // namespace ht
