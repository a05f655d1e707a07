// TrainingState <-> CheckpointData (the file format) and <-> bytes (the broadcast to other ranks).
#include "src/train/training_state.hpp"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "base/error.hpp"
#include "io/checkpoint/checkpoint_format.hpp"

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

// The one list of the state's fields besides its tensors and the loss scaler, with each field's
// checkpoint key; the field's type picks the group (integers: ints/, double and optional<double>:
// floats/, strings: strings/). The checkpoint datasets, the restore from them and the bytes of the
// broadcast walk this list; which ints a resume needs is the file format's kCheckpointResumeInts
// (the others keep their defaults when a file lacks them). A new field is one line here, plus where
// its value comes from and goes back to (Trainer::capture_state / restore_state).
template <class State, class Visit>
void for_each_field(State& s, Visit&& v) {
  auto& p = s.progress;
  v("step", p.step);
  v("epoch", p.epoch);
  v("step_in_epoch", p.step_in_epoch);
  v("nonfinite_in_row", p.nonfinite_in_row);
  v("nonfinite_total", p.nonfinite_total);
  v("epoch_offset", p.epoch_offset);  // absent in files of earlier builds
  v("world_size", s.world_size);
  v("seed", s.seed);
  v("global_batch", s.global_batch);
  v("total_steps", s.total_steps);
  v("steps_per_epoch", s.steps_per_epoch);
  v("lr", s.lr);
  v("train_loss", s.train_loss);
  v("test_top1", s.test_top1);
  v("test_loss", s.test_loss);
  v("model", s.model);
  v("config", s.config);
  v("config_hash", s.config_hash);
}

template <class T>
using Plain = std::remove_cvref_t<T>;
template <class T>
constexpr bool kIsInt = std::is_integral_v<Plain<T>>;
template <class T>
constexpr bool kIsFloat = std::is_same_v<Plain<T>, double>;
template <class T>
constexpr bool kIsOptionalFloat = std::is_same_v<Plain<T>, std::optional<double>>;

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
  for_each_field(s, [&d](const char* key, auto& f) {
    if constexpr (kIsInt<decltype(f)>) d.ints[key] = static_cast<int64_t>(f);
    else if constexpr (kIsFloat<decltype(f)>) d.floats[key] = f;
    else if constexpr (kIsOptionalFloat<decltype(f)>) { if (f) d.floats[key] = *f; }
    else d.strings[key] = std::move(f);
  });
  d.floats["loss_scale"] = 1.0;  // as earlier builds wrote without loss scaling
  if (s.loss_scale) s.loss_scale->to_checkpoint(d);
  return d;
}

TrainingState training_state_from_checkpoint(CheckpointData d, const std::string& origin, bool require_progress) {
  TrainingState s;
  for_each_field(s, [&](const char* key, auto& f) {
    using T = Plain<decltype(f)>;
    if constexpr (kIsInt<T>) {
      if (auto it = d.ints.find(key); it != d.ints.end()) f = static_cast<T>(it->second);
      else if (require_progress && is_checkpoint_resume_int(key)) d.get_int(key, origin);  // throws, naming both
    } else if constexpr (kIsFloat<T> || kIsOptionalFloat<T>) {
      if (auto it = d.floats.find(key); it != d.floats.end()) f = it->second;
    } else {
      if (auto it = d.strings.find(key); it != d.strings.end()) f = std::move(it->second);
    }
  });
  if (LossScaleState ls; LossScaleState::from_checkpoint(d, ls)) s.loss_scale = ls;
  s.tensors = std::move(d.tensors);
  return s;
}

std::vector<std::string> training_state_resume_ints() {
  std::vector<std::string> keys;
  for (const CheckpointResumeInt& r : kCheckpointResumeInts) keys.emplace_back(r.key);
  return keys;
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
  for_each_field(s, [&w](const char*, const auto& f) {
    if constexpr (kIsInt<decltype(f)>) w.i64(static_cast<int64_t>(f));
    else if constexpr (kIsFloat<decltype(f)>) w.f64(f);
    else if constexpr (kIsOptionalFloat<decltype(f)>) {
      w.u64(f ? 1 : 0);
      w.f64(f.value_or(0));
    } else w.str(f);
  });
  w.u64(s.loss_scale ? 1 : 0);
  w.f64(s.loss_scale ? s.loss_scale->scale : 1.0);
  w.i64(s.loss_scale ? s.loss_scale->clean_steps : 0);
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
  for_each_field(s, [&r](const char*, auto& f) {
    using T = Plain<decltype(f)>;
    if constexpr (kIsInt<T>) f = static_cast<T>(r.i64());
    else if constexpr (kIsFloat<T>) f = r.f64();
    else if constexpr (kIsOptionalFloat<T>) {
      const bool has = r.u64() != 0;
      const double v = r.f64();
      if (has) f = v;
    } else f = r.str();
  });
  const uint64_t has_scale = r.u64();
  LossScaleState ls;
  ls.scale = r.f64();
  ls.clean_steps = r.i64();
  if (has_scale) s.loss_scale = ls;
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
  auto in_group = [](const std::string& n) { return parse_state_tensor_name(n, nullptr, nullptr); };
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
    for (const std::string& k : training_state_resume_ints())
      if (!l.ints.count(k)) return "dataset /ints/" + k + " is missing (a resume needs it)";
  }
  for (const auto& [name, shape] : e.tensors) {
    StateGroup group;
    if (!e.resume && parse_state_tensor_name(name, &group, nullptr) && group == StateGroup::momentum) continue;
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
