#include "src/train/config.hpp"

#include <algorithm>
#include <boost/program_options.hpp>
#include <charconv>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <limits>
#include <map>
#include <sstream>

#include "base/error.hpp"
#include "base/suggest.hpp"
#include "base/enum_names.hpp"

namespace po = boost::program_options;

namespace ht {
namespace {

// The enum keys' spellings, in the order "must be one of" lists them.
template <class E> struct EnumNames;
template <> struct EnumNames<DeviceChoice> {
  static constexpr std::pair<DeviceChoice, const char*> table[] = {
      {DeviceChoice::cpu, "cpu"}, {DeviceChoice::cuda, "cuda"}, {DeviceChoice::automatic, "auto"}};
};
template <> struct EnumNames<Precision> {
  static constexpr std::pair<Precision, const char*> table[] = {
      {Precision::fp32, "fp32"}, {Precision::tf32, "tf32"}, {Precision::bf16, "bf16"}, {Precision::fp16, "fp16"}};
};
template <> struct EnumNames<GradDType> {
  static constexpr std::pair<GradDType, const char*> table[] = {{GradDType::fp32, "fp32"}, {GradDType::bf16, "bf16"}};
};
template <> struct EnumNames<LrSchedule> {
  static constexpr std::pair<LrSchedule, const char*> table[] = {
      {LrSchedule::constant, "constant"}, {LrSchedule::step, "step"}, {LrSchedule::cosine, "cosine"}};
};

template <class E> const char* enum_name(E v) { return ht::enum_name(v, EnumNames<E>::table); }

/// The value spelled `text`; UsageError "ORIGIN: key = text: must be one of a, b, c" otherwise.
template <class E> E enum_from_text(const std::string& key, const std::string& text, const std::string& origin) {
  std::string list;
  for (const auto& [e, name] : EnumNames<E>::table) {
    if (text == name) return e;
    list += (list.empty() ? "" : ", ") + std::string(name);
  }
  throw UsageError(origin + ": " + key + " = " + text + ": must be one of " + list);
}

}  // namespace

const char* to_string(DeviceChoice d) { return enum_name(d); }
const char* to_string(Precision p) { return enum_name(p); }
const char* to_string(LrSchedule s) { return enum_name(s); }
const char* to_string(GradDType g) { return enum_name(g); }

namespace {

/// The values a numeric key accepts: lo <= v <= hi (lo or hi excluded when open). Every numeric key
/// has one, checked at validation; the upper bounds keep absurd values (and integer overflow in
/// step arithmetic) out, far above any real run.
struct Range {
  double lo = 0, hi = 0;
  bool lo_open = false, hi_open = false;
  bool set = false;
  bool contains(double v) const {
    return (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  }
  /// "[0, 1)", "(0, 1e+05]": the interval in shortest round-trip numbers.
  std::string text() const;
};
constexpr Range closed(double lo, double hi) { return {lo, hi, false, false, true}; }
constexpr Range open_lo(double lo, double hi) { return {lo, hi, true, false, true}; }
constexpr Range half_open(double lo, double hi) { return {lo, hi, false, true, true}; }
constexpr Range kNoRange{};

/// The shortest text that reads back as exactly v (std::to_chars): 0.05f prints "0.05", not
/// "0.0500000007".
template <class T> std::string shortest(T v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string Range::text() const {
  return std::string(lo_open ? "(" : "[") + shortest(lo) + ", " + shortest(hi) + (hi_open ? ")" : "]");
}

// Every key once: the visitor gets (name, field, help, range). Parsing, printing, validation, the
// key table (--help, docs/config.md) and key listing all use it.
template <class C, class F> void visit_keys(C& c, F&& f) {
  f("run.dir", c.run.dir, "run directory", kNoRange);
  f("run.seed", c.run.seed, "seed for sampling, augmentation and initialisation", closed(0, 18446744073709551615.0));
  f("run.fresh", c.run.fresh, "start over on a run directory that has checkpoints", kNoRange);
  f("run.allow_config_change", c.run.allow_config_change, "resume even if model or global batch changed", kNoRange);
  f("run.max_hours", c.run.max_hours, "budget: wall hours of the whole run (0 = no limit)", closed(0, 1e6));
  f("run.max_gpu_hours", c.run.max_gpu_hours, "budget: device hours of the whole run (0 = no limit)", closed(0, 1e9));
  f("run.max_cost", c.run.max_cost, "budget: cost of the whole run at run.price_per_gpu_hour (0 = no limit)", closed(0, 1e12));
  f("run.price_per_gpu_hour", c.run.price_per_gpu_hour, "price of one device hour", closed(0, 1e6));
  f("data.dir", c.data.dir, "dataset directory", kNoRange);
  f("data.synthetic", c.data.synthetic, "generated data instead of data.dir", kNoRange);
  f("data.synthetic_samples", c.data.synthetic_samples, "synthetic train samples", closed(1, 1e9));
  f("data.synthetic_height", c.data.synthetic_height, "synthetic image height", closed(1, 4096));
  f("data.synthetic_width", c.data.synthetic_width, "synthetic image width", closed(1, 4096));
  f("data.synthetic_channels", c.data.synthetic_channels, "synthetic image channels", closed(1, 64));
  f("data.synthetic_classes", c.data.synthetic_classes, "synthetic class count", closed(1, 1e6));
  f("data.crop_padding", c.data.crop_padding, "random crop padding (0 = off)", closed(0, 1024));
  f("data.flip", c.data.flip, "random horizontal flip", kNoRange);
  f("data.crop_size", c.data.crop_size, "side of the images the model sees: centre crop, or random resized crop (0 = as stored)", closed(0, 4096));
  f("data.random_resized_crop", c.data.random_resized_crop, "train: random resized crop to data.crop_size (torchvision's)", kNoRange);
  f("data.random_resized_crop_min_scale", c.data.random_resized_crop_min_scale, "smallest area fraction of the random resized crop", open_lo(0, 1));
  f("data.loader_threads", c.data.loader_threads, "threads preparing each batch (crop, resize, flip, normalise)", closed(1, 1024));
  f("data.prefetch", c.data.prefetch, "prefetch the next batch on a background thread", kNoRange);
  f("data.limit_train", c.data.limit_train, "use only the first N train samples (0 = all)", closed(0, 1e12));
  f("data.limit_test", c.data.limit_test, "use only the first N test samples (0 = all)", closed(0, 1e12));
  f("data.stage_dir", c.data.stage_dir, "copy the shards to this node-local directory first (empty = off)", kNoRange);
  f("model.name", c.model.name, "fmnist_cnn, resnet18_cifar, resnet18, resnet50, mlp", kNoRange);
  f("model.num_classes", c.model.num_classes, "classes (0 = from the dataset)", closed(0, 1e6));
  f("model.mlp_hidden", c.model.mlp_hidden, "hidden width of the mlp model", closed(1, 1e6));
  f("train.device", c.train.device, "cpu, cuda or auto", kNoRange);
  f("train.epochs", c.train.epochs, "epochs (0 = unlimited)", closed(0, 1e6));
  f("train.max_steps", c.train.max_steps, "stop after this many steps (0 = unlimited)", closed(0, 1e12));
  f("train.global_batch", c.train.global_batch, "global batch (samples per optimizer step, all ranks)", closed(1, 1e8));
  f("train.accumulation_steps", c.train.accumulation_steps, "micro-batches per optimizer step", closed(1, 1e6));
  f("train.precision", c.train.precision, "fp32, tf32, bf16, fp16", kNoRange);
  f("train.label_smoothing", c.train.label_smoothing, "label smoothing", half_open(0, 1));
  f("train.max_nonfinite_steps", c.train.max_nonfinite_steps, "abort after this many skipped steps in a row", closed(1, 1e6));
  f("train.log_every_steps", c.train.log_every_steps, "progress line every N steps", closed(1, 1e12));
  f("train.eval_batch", c.train.eval_batch, "per-rank evaluation batch", closed(1, 1e8));
  f("train.eval", c.train.eval, "evaluate after each epoch", kNoRange);
  f("train.deterministic", c.train.deterministic, "deterministic algorithms only", kNoRange);
  f("train.threads", c.train.threads, "compute threads per rank (0 = auto)", closed(0, 4096));
  f("train.loss_scale.enabled", c.train.loss_scale.enabled, "dynamic loss scaling (always on with fp16)", kNoRange);
  f("train.loss_scale.initial", c.train.loss_scale.initial, "initial loss scale (a power of two)", closed(1e-30, 1e30));
  f("train.loss_scale.growth_interval", c.train.loss_scale.growth_interval, "clean steps before the scale doubles", closed(1, 1e9));
  f("train.loss_scale.min", c.train.loss_scale.min, "smallest loss scale (a power of two)", closed(1e-30, 1e30));
  f("train.loss_scale.max", c.train.loss_scale.max, "largest loss scale (a power of two)", closed(1e-30, 1e30));
  f("optim.lr", c.optim.lr, "peak learning rate", closed(0, 1e3));
  f("optim.momentum", c.optim.momentum, "SGD momentum", half_open(0, 1));
  f("optim.weight_decay", c.optim.weight_decay, "L2 weight decay", closed(0, 1));
  f("optim.nesterov", c.optim.nesterov, "Nesterov momentum", kNoRange);
  f("optim.wd_on_bias_bn", c.optim.wd_on_bias_bn, "weight decay on biases and batch-norm parameters", kNoRange);
  f("optim.schedule", c.optim.schedule, "constant, step, cosine", kNoRange);
  f("optim.warmup_steps", c.optim.warmup_steps, "linear warm-up steps", closed(0, 1e12));
  f("optim.step_epochs", c.optim.step_epochs, "step schedule period in epochs", closed(1, 1e6));
  f("optim.step_gamma", c.optim.step_gamma, "step schedule factor", closed(0, 10));
  f("optim.min_lr", c.optim.min_lr, "cosine schedule floor", closed(0, 1e3));
  f("checkpoint.every_steps", c.checkpoint.every_steps, "checkpoint every N steps (0 = off)", closed(0, 1e12));
  f("checkpoint.every_minutes", c.checkpoint.every_minutes, "checkpoint every T minutes (0 = off)", closed(0, 1e6));
  f("checkpoint.keep_last", c.checkpoint.keep_last, "keep the last K checkpoints", closed(1, 1e6));
  f("checkpoint.keep_every", c.checkpoint.keep_every, "keep every checkpoint at a multiple of N steps", closed(0, 1e12));
  f("checkpoint.mtbf_minutes", c.checkpoint.mtbf_minutes, "Young/Daly interval from this MTBF", closed(0, 1e9));
  f("checkpoint.async", c.checkpoint.async, "write checkpoints on a background thread", kNoRange);
  f("checkpoint.signals", c.checkpoint.signals, "signals that checkpoint and stop (exit 75)", kNoRange);
  f("dist.bucket_mb", c.dist.bucket_mb, "gradient bucket size in MB", open_lo(0, 1e5));
  f("dist.grad_dtype", c.dist.grad_dtype, "fp32 or bf16: the type gradients travel in", kNoRange);
  f("dist.allow_shared_gpu", c.dist.allow_shared_gpu, "allow two ranks on one GPU", kNoRange);
  f("dist.timeout_s", c.dist.timeout_s, "NCCL init and collective time limit", open_lo(0, 1e7));
  f("dist.check_replicas_every", c.dist.check_replicas_every, "verify identical parameters on all ranks every N steps", closed(0, 1e12));
  f("verify.enabled", c.verify.enabled, "vet dataset shards and checkpoints in a time-limited child process", kNoRange);
  f("verify.timeout_s", c.verify.timeout_s, "vetting time limit per file, plus its size at verify.min_mb_per_s", open_lo(0, 1e7));
  f("verify.min_mb_per_s", c.verify.min_mb_per_s, "read rate the vetting time limit allows for (MB/s)", open_lo(0, 1e6));
  f("watchdog.enabled", c.watchdog.enabled, "warn about data stalls, idle GPUs, exposed communication, slow ranks", kNoRange);
  f("watchdog.window_steps", c.watchdog.window_steps, "steps per watchdog judgement", closed(1, 1e9));
  f("watchdog.max_data_share", c.watchdog.max_data_share, "warn above this share of the step waiting for data", open_lo(0, 1));
  f("watchdog.max_comm_share", c.watchdog.max_comm_share, "warn above this share of the step in exposed communication", open_lo(0, 1));
  f("watchdog.min_gpu_util_pct", c.watchdog.min_gpu_util_pct, "warn below this GPU utilisation (NVML)", closed(0, 100));
  f("watchdog.max_rank_spread", c.watchdog.max_rank_spread, "warn when the slowest rank is this many times the median", open_lo(1, 1e6));
  f("watchdog.repeat_minutes", c.watchdog.repeat_minutes, "repeat a kind of warning at most every N minutes", closed(0, 1e6));
  f("watchdog.slow_rank_stop_windows", c.watchdog.slow_rank_stop_windows,
    "save a checkpoint and stop (exit 4) once the same rank is judged slow in this many windows in a row (0: never)",
    closed(0, 1e6));
  f("trace.enabled", c.trace.enabled, "write a Chrome trace", kNoRange);
  f("cuda.workspace_mb", c.cuda.workspace_mb, "cuDNN workspace cap per convolution", closed(0, 1e7));
}

template <class T> std::string fmt(const T& v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v ? "true" : "false";
  } else if constexpr (std::is_enum_v<T>) {
    return to_string(v);
  } else if constexpr (std::is_arithmetic_v<T>) {
    return shortest(v);
  } else {
    return v;
  }
}

template <class T> constexpr bool kIsNumber = std::is_arithmetic_v<T> && !std::is_same_v<T, bool>;

/// The type a key's value must have, as --help and errors name it.
template <class T> std::string type_name() {
  if constexpr (std::is_same_v<T, bool>) return "bool";
  else if constexpr (std::is_integral_v<T>) return "int";
  else if constexpr (std::is_floating_point_v<T>) return "float";
  else return "string";  // enums too: their values are listed as the key's choices
}

/// The values an enum key accepts ("cpu, cuda, auto"); empty for other types.
template <class T> std::string choices() {
  std::string list;
  if constexpr (std::is_enum_v<T>)
    for (const auto& [e, name] : EnumNames<T>::table) list += (list.empty() ? "" : ", ") + std::string(name);
  return list;
}

// Enum and numeric keys are read as text and converted in validate(), so that a bad value gets the
// same message as every other invalid value ("key = value: must be ..."), naming the type expected.
// Key -> text as given.
using KeyText = std::map<std::string, std::string, std::less<>>;

/// text as a T: an integer key also takes an exact integer in floating notation ("1e3"). False
/// when text is not a (finite) number of T's kind or does not fit T.
template <class T> bool parse_number(const std::string& text, T& out) {
  const char* b = text.data();
  const char* e = b + text.size();
  if constexpr (std::is_integral_v<T>) {
    if (text.empty() || (std::is_unsigned_v<T> && text[0] == '-')) return false;
    if (auto r = std::from_chars(b, e, out); r.ec == std::errc() && r.ptr == e) return true;
  }
  double v = 0;
  const auto r = std::from_chars(b, e, v);
  if (r.ec != std::errc() || r.ptr != e || !std::isfinite(v)) return false;
  if constexpr (std::is_integral_v<T>) {
    if (v != std::floor(v) || v < double(std::numeric_limits<T>::lowest()) ||
        v >= double(std::numeric_limits<T>::max()))
      return false;
    out = static_cast<T>(v);
  } else {
    if (std::abs(v) > double(std::numeric_limits<T>::max())) return false;
    out = static_cast<T>(v);
  }
  return true;
}

po::options_description make_description(Config& c, KeyText& key_text) {
  po::options_description d("hpctrain config");
  visit_keys(c, [&](const char* name, auto& field, const char* help, const Range&) {
    using T = std::decay_t<decltype(field)>;
    if constexpr (std::is_enum_v<T> || kIsNumber<T>) {
      std::string& text = key_text[name] = fmt(field);
      d.add_options()(name, po::value<std::string>(&text)->default_value(text, text), help);
    } else if constexpr (std::is_same_v<T, bool>)
      d.add_options()(name, po::value<T>(&field)->default_value(field, fmt(field))->implicit_value(true), help);
    else
      d.add_options()(name, po::value<T>(&field)->default_value(field, fmt(field)), help);
  });
  return d;
}

void require(bool ok, const std::string& origin, const std::string& key, const std::string& value,
             const std::string& why) {
  if (!ok) throw UsageError(origin + ": " + key + " = " + value + ": " + why);
}

/// run.max_* / run.price_per_gpu_hour and watchdog.* (src/train/budget.hpp, watchdog.hpp).
void validate_runops_keys(const Config& c, const std::string& origin) {
  const auto& r = c.run;
  for (auto [key, v] : {std::pair{"run.max_hours", r.max_hours}, {"run.max_gpu_hours", r.max_gpu_hours},
                        {"run.max_cost", r.max_cost}, {"run.price_per_gpu_hour", r.price_per_gpu_hour}})
    require(v >= 0, origin, key, fmt(v), "must be >= 0 (0 = no limit)");
  require(r.max_cost == 0 || r.price_per_gpu_hour > 0, origin, "run.max_cost", fmt(r.max_cost),
          "needs run.price_per_gpu_hour > 0 to turn device hours into cost");
  const auto& w = c.watchdog;
  require(w.window_steps >= 1, origin, "watchdog.window_steps", fmt(w.window_steps), "must be >= 1");
  require(w.max_data_share > 0 && w.max_data_share <= 1, origin, "watchdog.max_data_share", fmt(w.max_data_share),
          "must be in (0, 1]");
  require(w.max_comm_share > 0 && w.max_comm_share <= 1, origin, "watchdog.max_comm_share", fmt(w.max_comm_share),
          "must be in (0, 1]");
  require(w.min_gpu_util_pct >= 0 && w.min_gpu_util_pct <= 100, origin, "watchdog.min_gpu_util_pct",
          fmt(w.min_gpu_util_pct), "must be in [0, 100]");
  require(w.max_rank_spread > 1, origin, "watchdog.max_rank_spread", fmt(w.max_rank_spread), "must be > 1");
  require(w.repeat_minutes >= 0, origin, "watchdog.repeat_minutes", fmt(w.repeat_minutes), "must be >= 0");
}

/// Converts the enum and numeric keys from `key_text` into `c` and checks every value; UsageError
/// naming the origin, key and value for the first invalid one.
void validate(Config& c, const KeyText& key_text, const std::string& origin) {
  auto oneof = [&](const std::string& key, const std::string& v, std::initializer_list<const char*> allowed) {
    for (auto* a : allowed)
      if (v == a) return;
    std::string list;
    for (auto* a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
    throw UsageError(origin + ": " + key + " = " + v + ": must be one of " + list);
  };
  oneof("model.name", c.model.name, {"fmnist_cnn", "resnet18_cifar", "resnet18", "resnet50", "mlp"});
  visit_keys(c, [&](const char* name, auto& field, const char*, const Range&) {
    using T = std::decay_t<decltype(field)>;
    if constexpr (std::is_enum_v<T>) field = enum_from_text<T>(name, key_text.find(name)->second, origin);
    if constexpr (kIsNumber<T>) {
      const std::string& text = key_text.find(name)->second;
      require(parse_number(text, field), origin, name, text,
              "must be " + std::string(std::is_integral_v<T> ? "an integer" : "a number"));
    }
  });
  require(c.train.global_batch > 0, origin, "train.global_batch", fmt(c.train.global_batch), "must be positive");
  require(c.train.accumulation_steps > 0, origin, "train.accumulation_steps", fmt(c.train.accumulation_steps),
          "must be positive");
  require(c.train.epochs >= 0, origin, "train.epochs", fmt(c.train.epochs), "must be >= 0");
  require(c.train.max_steps >= 0, origin, "train.max_steps", fmt(c.train.max_steps), "must be >= 0");
  require(c.train.epochs > 0 || c.train.max_steps > 0, origin, "train.epochs", fmt(c.train.epochs),
          "train.epochs and train.max_steps are both 0: the run would never stop");
  require(c.optim.lr >= 0, origin, "optim.lr", fmt(c.optim.lr), "must be >= 0");
  require(c.optim.momentum >= 0 && c.optim.momentum < 1, origin, "optim.momentum", fmt(c.optim.momentum),
          "must be in [0, 1)");
  require(c.train.label_smoothing >= 0 && c.train.label_smoothing < 1, origin, "train.label_smoothing",
          fmt(c.train.label_smoothing), "must be in [0, 1)");
  require(c.verify.timeout_s > 0, origin, "verify.timeout_s", fmt(c.verify.timeout_s), "must be positive");
  require(c.verify.min_mb_per_s > 0, origin, "verify.min_mb_per_s", fmt(c.verify.min_mb_per_s), "must be positive");
  require(c.dist.bucket_mb > 0, origin, "dist.bucket_mb", fmt(c.dist.bucket_mb), "must be positive");
  if (const std::string p = loss_scale_config_problem(c.train.loss_scale); !p.empty())
    throw UsageError(origin + ": " + p);
  require(c.checkpoint.keep_last >= 1, origin, "checkpoint.keep_last", fmt(c.checkpoint.keep_last), "must be >= 1");
  validate_runops_keys(c, origin);
  require(c.data.crop_padding >= 0, origin, "data.crop_padding", fmt(c.data.crop_padding), "must be >= 0");
  require(c.data.synthetic || !c.data.dir.empty(), origin, "data.dir", "\"\"",
          "no dataset given: set data.dir (see scripts/quickstart.sh) or data.synthetic = true");
  // Every numeric key within its range (the checks above give the more specific messages first).
  visit_keys(c, [&](const char* name, auto& field, const char*, const Range& r) {
    using T = std::decay_t<decltype(field)>;
    if constexpr (kIsNumber<T>)
      require(r.contains(static_cast<double>(field)), origin, name, fmt(field), "must be in " + r.text());
  });
}

std::string unknown_key_message(const std::string& key, const std::string& origin) {
  std::string k = key;
  while (!k.empty() && k[0] == '-') k.erase(0, 1);
  return origin + ": unknown config key '" + k + "' (did you mean '" + closest_key(k) + "'?)";
}

}  // namespace

std::vector<std::string> config_keys() {
  Config c;
  std::vector<std::string> keys;
  visit_keys(c, [&](const char* name, auto&, const char*, const Range&) { keys.emplace_back(name); });
  return keys;
}

std::vector<ConfigKey> config_key_table() {
  Config c;
  std::vector<ConfigKey> keys;
  visit_keys(c, [&](const char* name, auto& field, const char* help, const Range& r) {
    using T = std::decay_t<decltype(field)>;
    keys.push_back({name, type_name<T>(), fmt(field), help, r.set ? r.text() : "", choices<T>()});
  });
  return keys;
}

std::vector<ConfigChange> config_differences(const Config& a0, const Config& b0) {
  Config a = a0, b = b0;
  std::vector<ConfigChange> out;
  std::map<std::string, std::string> av;
  visit_keys(a, [&](const char* name, auto& field, const char*, const Range&) { av[name] = fmt(field); });
  visit_keys(b, [&](const char* name, auto& field, const char*, const Range&) {
    if (av[name] != fmt(field)) out.push_back({name, av[name], fmt(field)});
  });
  return out;
}

namespace {
/// Names users bring from other trainers (PyTorch scripts, Hugging Face, Horovod examples), as the
/// key they mean here, so "optim.learnig_rate" suggests optim.lr rather than the nearest spelling.
/// Grouped by that key; tried in this order.
const std::vector<std::pair<const char*, std::vector<const char*>>>& key_aliases() {
  static const std::vector<std::pair<const char*, std::vector<const char*>>> a = {
      {"optim.lr", {"learning_rate", "base_lr"}},
      {"optim.schedule", {"lr_schedule", "scheduler"}},
      {"optim.warmup_steps", {"warmup", "warmup_epochs"}},
      {"optim.weight_decay", {"wd"}},
      {"train.global_batch", {"batch_size", "global_batch_size", "micro_batch"}},
      {"train.epochs", {"num_epochs", "max_epochs"}},
      {"train.accumulation_steps", {"gradient_accumulation_steps", "grad_accum"}},
      {"train.precision", {"amp", "mixed_precision", "dtype"}},
      {"data.dir", {"data_dir", "dataset"}},
      {"run.dir", {"output_dir", "save_dir"}},
      {"checkpoint.every_steps", {"save_steps", "checkpoint_every"}},
      {"model.name", {"arch"}},
  };
  return a;
}
}  // namespace

std::string closest_key(const std::string& key) {
  std::string best;
  size_t best_d = std::numeric_limits<size_t>::max();
  const auto dot_k = key.find('.');
  const std::string bare = dot_k == std::string::npos ? key : key.substr(dot_k + 1);
  auto consider = [&](const std::string& candidate, size_t d) {
    if (d < best_d) best_d = d, best = candidate;
  };
  for (const auto& k : config_keys()) {
    // Compare against the full key and against the part after the section, so "lr" finds optim.lr.
    size_t d = edit_distance(key, k);
    auto dot = k.find('.');
    if (key.find('.') == std::string::npos && dot != std::string::npos)
      d = std::min(d, edit_distance(key, k.substr(dot + 1)));
    consider(k, d);
  }
  // An alias matched by its own spelling beats a real key matched by chance.
  for (const auto& [k, aliases] : key_aliases())
    for (const char* alias : aliases) consider(k, edit_distance(bare, alias));
  return best;
}

std::string to_ini(const Config& c0) {
  Config c = c0;
  std::ostringstream os;
  std::string section;
  visit_keys(c, [&](const char* name, auto& field, const char*, const Range&) {
    std::string n(name);
    auto dot = n.find('.');
    std::string s = n.substr(0, dot);
    if (s != section) {
      os << (section.empty() ? "" : "\n") << "[" << s << "]\n";
      section = s;
    }
    os << n.substr(dot + 1) << " = " << fmt(field) << "\n";
  });
  return os.str();
}

static Config parse_impl(const std::vector<std::string>& args, std::vector<std::string>* extra,
                         const std::string* ini_text, const std::string& ini_origin) {
  Config c;
  KeyText key_text;
  po::options_description d = make_description(c, key_text);
  std::string config_file;
  po::options_description top("hpctrain train");
  top.add_options()("config", po::value<std::string>(&config_file), "INI config file");
  po::options_description all;
  all.add(top).add(d);
  po::variables_map vm;
  try {
    auto parsed = po::command_line_parser(args).options(all).allow_unregistered().run();
    po::store(parsed, vm);
    for (const auto& o : parsed.options) {
      if (!o.unregistered && o.position_key < 0) continue;
      const std::string& name = o.string_key;
      if (name.empty() && extra) {  // a positional value, e.g. the path after --init-from
        for (const auto& tok : o.original_tokens) extra->push_back(tok);
        continue;
      }
      if (name.find('.') != std::string::npos || extra == nullptr)
        throw UsageError(unknown_key_message(name, "command line"));
      for (const auto& tok : o.original_tokens) extra->push_back(tok);
    }
  } catch (const po::error& e) {
    throw UsageError(std::string("command line: ") + e.what());
  }
  std::string origin = ini_origin;
  auto parse_stream = [&](std::istream& in) {
    try {
      po::store(po::parse_config_file(in, d, /*allow_unregistered=*/false), vm);
    } catch (const po::unknown_option& e) {
      throw UsageError(unknown_key_message(e.get_option_name(), origin));
    } catch (const po::error& e) {
      throw UsageError(origin + ": " + e.what());
    }
  };
  if (ini_text) {
    std::istringstream in(*ini_text);
    parse_stream(in);
  }
  if (vm.count("config")) {
    config_file = vm["config"].as<std::string>();
    origin = config_file;
    std::ifstream in(config_file);
    if (!in) throw UsageError("--config " + config_file + ": cannot open the file");
    parse_stream(in);
  }
  try {
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(origin + ": " + e.what());
  }
  validate(c, key_text, vm.count("config") ? "config " + origin + " with command-line flags" : origin);
  return c;
}

Config parse_config(const std::vector<std::string>& args, std::vector<std::string>* extra) {
  return parse_impl(args, extra, nullptr, "command line");
}

Config parse_config_text(const std::string& ini, const std::string& origin) {
  return parse_impl({}, nullptr, &ini, origin);
}

}  // namespace ht
