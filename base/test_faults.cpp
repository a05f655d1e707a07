#include "base/test_faults.hpp"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <thread>
#include <stdexcept>

#include "base/error.hpp"

namespace ht {

const std::vector<TestFaultName>& test_fault_names() {
  static const std::vector<TestFaultName> names = {
      {"fail_at_step", "train: throw a RuntimeError at this step (on fail_rank, default every rank)"},
      {"fail_rank", "train: the rank that fails at fail_at_step"},
      {"nan_at_step", "train: put NaN into the input of nan_rank at this step"},
      {"nan_rank", "train: the rank whose input gets NaN at nan_at_step"},
      {"slow_data_ms", "train: sleep this many milliseconds in the data phase of every step ('|': per rank)"},
      {"stage.free_bytes", "stage: pretend data.stage_dir has this many bytes free"},
      {"ckpt_write_delay_ms", "checkpoint: sleep this long half-way through each checkpoint write"},
      {"signal_at_step", "checkpoint: send SIGTERM to this process after this step (on signal_rank)"},
      {"signal_rank", "checkpoint: the rank that signals itself (default 0)"},
      {"conv.fast_path_error", "conv2d (CPU): perturb the fast algorithm's result in the fast-path check for these passes (forward, backward_data, backward_weights, all)"},
      {"verify.child_crash", "verify: the vetting child raises SIGSEGV on a file whose path contains this text"},
      {"verify.child_hang", "verify: the vetting child sleeps forever on a file whose path contains this text"},
      {"doctor.gpu_uuids", "doctor: visible GPUs as comma-separated UUIDs, or none"},
      {"doctor.hosts", "doctor: host names (pretend ranks run on different hosts)"},
      {"doctor.qualify_slowdown", "doctor --qualify: factor (>= 1) on the rank's measured compute and network times"},
      {"doctor.cudnn_version", "doctor: RUNTIME[/BUILT] cuDNN version (integer) or missing"},
      {"doctor.nccl_version", "doctor: RUNTIME[/BUILT] NCCL version (integer) or missing"},
      {"doctor.hdf5_version", "doctor: run-time HDF5 version (1.10.7)"},
      {"doctor.mpi_version", "doctor: MPI library version string"},
      {"doctor.exe_hash", "doctor: hash of the executable"},
      {"doctor.fstype", "doctor: file system of the run directory (nfs, lustre, ext4, ...)"},
      {"doctor.free_bytes", "doctor: free bytes in the run directory"},
  };
  return names;
}

namespace {
bool known(std::string_view name) {
  for (const auto& n : test_fault_names())
    if (name == n.name) return true;
  return false;
}
}  // namespace

TestFaults TestFaults::parse(std::string_view spec) {
  TestFaults f;
  f.spec_ = std::string(spec);
  size_t pos = 0;
  while (pos < spec.size()) {
    size_t end = spec.find(';', pos);
    if (end == std::string_view::npos) end = spec.size();
    std::string_view item = spec.substr(pos, end - pos);
    pos = end + 1;
    if (item.empty()) continue;
    size_t eq = item.find('=');
    if (eq == std::string_view::npos)
      throw UsageError("HT_TEST_FAULTS: '" + std::string(item) + "' is not name=value");
    auto trim = [](std::string_view s) {
      while (!s.empty() && (s.front() == ' ' || s.front() == '\n')) s.remove_prefix(1);
      while (!s.empty() && (s.back() == ' ' || s.back() == '\n')) s.remove_suffix(1);
      return std::string(s);
    };
    std::string name = trim(item.substr(0, eq));
    if (!known(name)) throw UsageError("HT_TEST_FAULTS: unknown fault '" + name + "' (docs/testing.md lists them)");
    f.values_[name] = std::string(item.substr(eq + 1));
  }
  return f;
}

const TestFaults& TestFaults::get() {
  static const TestFaults f = [] {
    const char* s = std::getenv("HT_TEST_FAULTS");
    return s ? parse(s) : TestFaults{};
  }();
  return f;
}

bool TestFaults::has(std::string_view name) const { return values_.find(name) != values_.end(); }

std::optional<std::string> TestFaults::text(std::string_view name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> TestFaults::text_for_rank(std::string_view name, int rank) const {
  auto v = text(name);
  if (!v || v->find('|') == std::string::npos) return v;
  size_t pos = 0;
  for (int r = 0;; ++r) {
    size_t end = v->find('|', pos);
    if (r == rank) return v->substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    if (end == std::string::npos) return std::nullopt;
    pos = end + 1;
  }
}

namespace {
/// Parses the whole of `v` with `conv` (std::stoll or std::stod); UsageError naming name and value.
template <class T, class Conv>
T parse_fault_value(std::string_view name, const std::string& v, Conv conv, const char* what) {
  try {
    size_t used = 0;
    T x = conv(v, &used);
    if (used == v.size()) return x;
  } catch (const std::exception&) {
  }
  throw UsageError("HT_TEST_FAULTS: " + std::string(name) + "=" + v + " is not " + what);
}
}  // namespace

int64_t TestFaults::integer(std::string_view name, int64_t fallback) const {
  auto v = text(name);
  if (!v) return fallback;
  return parse_fault_value<int64_t>(name, *v, [](const std::string& s, size_t* u) { return std::stoll(s, u); },
                                    "an integer");
}

double TestFaults::number(std::string_view name, double fallback) const {
  auto v = text(name);
  if (!v) return fallback;
  return parse_fault_value<double>(name, *v, [](const std::string& s, size_t* u) { return std::stod(s, u); },
                                   "a number");
}

StepFaults StepFaults::for_rank(int rank) {
  const TestFaults& tf = TestFaults::get();
  StepFaults f;
  if (!tf.active()) return f;
  auto on_this_rank = [&](const char* name) {
    const int64_t r = tf.integer(name, -1);
    return r < 0 || r == rank;
  };
  if (on_this_rank("fail_rank")) f.fail_at_step_ = tf.integer("fail_at_step", -1);
  if (on_this_rank("nan_rank")) f.nan_at_step_ = tf.integer("nan_at_step", -1);
  if (const auto v = tf.text_for_rank("slow_data_ms", rank); v && !v->empty()) {
    try {
      f.slow_data_ms_ = std::stod(*v);
    } catch (const std::exception&) {
      throw UsageError("HT_TEST_FAULTS: slow_data_ms=" + *v + " is not a number (milliseconds)");
    }
  }
  return f;
}

void StepFaults::on_batch(int64_t step, Tensor& images) {
  if (slow_data_ms_ > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(slow_data_ms_));
  if (fail_at_step_ >= 0 && step == fail_at_step_)
    throw RuntimeError("injected failure (HT_TEST_FAULTS fail_at_step) at step " + std::to_string(step));
  if (nan_at_step_ >= 0 && step == nan_at_step_ && images.numel() > 0 && !nan_done_) {
    Tensor nan = Tensor::empty({1});
    nan.data<float>()[0] = NAN;
    images.slice_flat(0, {1}).copy_from(nan);  // on the compute device
    nan_done_ = true;
  }
}

}  // namespace ht
