// hpctrain bench checkpoint: checkpoint write time for a resnet18_cifar-sized state (parameters,
// BatchNorm buffers and momentum: ~89 MB) against a plain write + fsync of the same bytes in the same
// directory, and the stall a training loop sees per checkpoint with asynchronous writing.
//
// The training loop is simulated by a fixed amount of single-threaded arithmetic per step (calibrated
// to --step-ms), so the measured step time also shows how much a background write slows compute.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "base/stats.hpp"
#include "io/checkpoint/checkpoint_store.hpp"
#include "io/checkpoint/checkpoint_format.hpp"
#include "io/checkpoint/checkpoint_writer.hpp"
#include "src/cli/cli_options.hpp"
#include "src/cli/commands.hpp"
#include "base/clock.hpp"
#include "base/error.hpp"
#include "base/log.hpp"

namespace fs = std::filesystem;

namespace ht {
namespace {

using Clock = std::chrono::steady_clock;

std::string load_1min() {  // a shared machine: say how busy it was
  std::ifstream la("/proc/loadavg");
  std::string l1;
  la >> l1;
  return l1;
}

// torchvision-style names and shapes of ResNet-18 with the CIFAR stem (3x3 conv1, no max-pool).
std::vector<std::pair<std::string, std::vector<int64_t>>> resnet18_cifar_params(
    std::vector<std::pair<std::string, std::vector<int64_t>>>* buffers) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> p;
  auto bn = [&](const std::string& n, int64_t c) {
    p.push_back({n + ".weight", {c}});
    p.push_back({n + ".bias", {c}});
    buffers->push_back({n + ".running_mean", {c}});
    buffers->push_back({n + ".running_var", {c}});
  };
  p.push_back({"conv1.weight", {64, 3, 3, 3}});
  bn("bn1", 64);
  int64_t in = 64;
  for (int layer = 1; layer <= 4; ++layer) {
    int64_t out = 64 << (layer - 1);
    for (int b = 0; b < 2; ++b) {
      std::string pre = "layer" + std::to_string(layer) + "." + std::to_string(b);
      p.push_back({pre + ".conv1.weight", {out, b == 0 ? in : out, 3, 3}});
      bn(pre + ".bn1", out);
      p.push_back({pre + ".conv2.weight", {out, out, 3, 3}});
      bn(pre + ".bn2", out);
      if (b == 0 && in != out) {
        p.push_back({pre + ".downsample.0.weight", {out, in, 1, 1}});
        bn(pre + ".downsample.1", out);
      }
    }
    in = out;
  }
  p.push_back({"fc.weight", {10, 512}});
  p.push_back({"fc.bias", {10}});
  return p;
}

Tensor random_tensor(const std::vector<int64_t>& shape, uint32_t seed) {
  Tensor t = Tensor::empty(shape);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& v : t.span<float>()) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    v = static_cast<float>(x) * 2.3283064e-10f - 0.5f;
  }
  return t;
}

CheckpointData make_state(int64_t step, int64_t* nparams) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> buffers;
  auto params = resnet18_cifar_params(&buffers);
  CheckpointData d;
  uint32_t seed = 1;
  *nparams = 0;
  for (auto& [n, s] : params) {
    d.tensors.emplace_back(state_tensor_name(StateGroup::param, n), random_tensor(s, seed++));
    *nparams += shape_numel(s);
  }
  for (auto& [n, s] : buffers) d.tensors.emplace_back(state_tensor_name(StateGroup::buffer, n), random_tensor(s, seed++));
  for (auto& [n, s] : params) d.tensors.emplace_back(state_tensor_name(StateGroup::momentum, n), random_tensor(s, seed++));
  d.ints = {{"step", step}, {"epoch", 0}, {"step_in_epoch", step}, {"world_size", 1}, {"global_batch", 128}};
  d.floats = {{"lr", 0.1}};
  d.strings = {{"model", "resnet18_cifar"}};
  return d;
}

// Deep host copy, as the trainer makes before handing the state to the writer.
CheckpointData host_copy(const CheckpointData& src) {
  CheckpointData d;
  d.ints = src.ints;
  d.floats = src.floats;
  d.strings = src.strings;
  d.tensors.reserve(src.tensors.size());
  for (auto& [n, t] : src.tensors) {
    Tensor c = Tensor::empty(t.shape());
    c.copy_from(t);
    d.tensors.emplace_back(n, std::move(c));
  }
  return d;
}

// Plain write + fsync of the tensors' bytes, in ms; *unlink_ms gets the time to delete the file again
// (not part of the plain figure; reported next to the checkpoint's pruning of an older file).
double plain_write_ms(const std::string& path, const std::vector<const Tensor*>& ts, double* unlink_ms = nullptr) {
  auto t0 = Clock::now();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw RuntimeError("bench checkpoint: cannot create " + path + ": " + std::strerror(errno));
  for (auto* t : ts) {
    const char* p = static_cast<const char*>(t->raw());
    size_t left = t->nbytes();
    while (left) {
      ssize_t w = ::write(fd, p, left);
      if (w <= 0) {
        ::close(fd);
        throw RuntimeError("bench checkpoint: write " + path + ": " + std::strerror(errno));
      }
      p += w, left -= static_cast<size_t>(w);
    }
  }
  ::fsync(fd);
  ::close(fd);
  double ms = ms_since(t0);
  auto t1 = Clock::now();
  ::unlink(path.c_str());
  if (unlink_ms) *unlink_ms = ms_since(t1);
  return ms;
}

// A fixed amount of single-threaded arithmetic standing in for one training step.
volatile float g_sink = 0;
void fake_step(std::vector<float>& buf, int64_t iters) {
  float acc = 0;
  for (int64_t it = 0; it < iters; ++it)
    for (size_t i = 0; i < buf.size(); ++i) {
      buf[i] = buf[i] * 0.999f + 0.001f;
      acc += buf[i];
    }
  g_sink = acc;
}

}  // namespace

int bench_checkpoint(const Args& args) {
  std::string dir = "/tmp/hpctrain-bench-checkpoint", out = "results/cpu/bench_checkpoint.json";
  int repeats = 5, steps = 40, every = 8;
  double step_ms_target = 250;
  CommandLine cl("hpctrain bench checkpoint",
                 "usage: hpctrain bench checkpoint [--dir DIR] [--out JSON] [--repeats N] [--steps N] [--every N] "
                 "[--step-ms MS]");
  cl.option("dir", &dir, "DIR", "scratch directory, removed at the end")
      .option("out", &out, "JSON", "results file")
      .option("repeats", &repeats, "N", "synchronous writes measured")
      .option("steps", &steps, "N", "simulated training steps")
      .option("every", &every, "N", "an asynchronous checkpoint every N steps")
      .option("step-ms", &step_ms_target, "MS", "simulated step time in ms");
  if (!cl.parse(args)) return kExitOk;
  std::string load_start = load_1min();
  fs::remove_all(dir);
  fs::create_directories(dir);
  int64_t nparams = 0;
  CheckpointData state = make_state(0, &nparams);
  std::vector<const Tensor*> ts;
  for (auto& [n, t] : state.tensors) ts.push_back(&t);
  size_t payload = state.payload_bytes();
  std::ostringstream o;  // a report's lines, printed with ostream's number formats
  o << "state: resnet18_cifar, " << nparams << " parameters, " << state.tensors.size() << " tensors, " << payload
    << " bytes";
  log_raw_out(o.str());

  // 1) synchronous checkpoint write vs plain write + fsync, interleaved so both see the same disk state.
  std::vector<double> plain, ckpt, build, data_ms, fsync_ms, publish_ms, prune_ms, unpruned, plain_unlink;
  size_t file_bytes = 0;
  CheckpointWriteOptions opt;
  opt.keep_last = 2;
  plain_write_ms(dir + "/warmup.bin", ts);
  for (int r = 0; r < repeats; ++r) {
    double ul = 0;
    plain.push_back(plain_write_ms(dir + "/plain.bin", ts, &ul));
    plain_unlink.push_back(ul);
    auto res = write_checkpoint(dir + "/run", r + 1, state, opt);
    ckpt.push_back(res.write_ms);
    data_ms.push_back(res.data_ms);
    fsync_ms.push_back(res.fsync_ms);
    publish_ms.push_back(res.publish_ms);
    prune_ms.push_back(res.prune_ms);
    unpruned.push_back(res.write_ms - res.prune_ms);
    file_bytes = res.bytes;
  }
  {
    auto t0 = Clock::now();
    auto back = read_checkpoint_file(checkpoint_path(dir + "/run", repeats));
    double read_ms = ms_since(t0);
    if (back.payload_bytes() != payload) throw RuntimeError("bench checkpoint: read back a different payload");
    build.push_back(read_ms);
  }
  double plain_ms = median(plain), ckpt_ms = median(ckpt);
  o.str("");
  o << "plain write+fsync: " << plain_ms << " ms;  checkpoint write: " << ckpt_ms << " ms  (ratio "
    << ckpt_ms / plain_ms << ");  verified read: " << build[0] << " ms\n"
    << "checkpoint parts (medians): file written " << median(data_ms) << " ms, fsync " << median(fsync_ms)
    << " ms, rename + dir fsync + LATEST " << median(publish_ms) << " ms, pruning older checkpoints "
    << median(prune_ms) << " ms;  without pruning " << median(unpruned) << " ms (ratio "
    << median(unpruned) / plain_ms << ");  unlinking the plain file " << median(plain_unlink) << " ms";
  log_raw_out(o.str());

  // 2) simulated training with asynchronous checkpoints every `every` steps.
  std::vector<float> buf(1 << 16, 1.f);
  int64_t iters = 1;
  {
    auto t0 = Clock::now();
    fake_step(buf, 50);
    double per = ms_since(t0) / 50;
    iters = std::max<int64_t>(1, static_cast<int64_t>(step_ms_target / per));
  }
  CheckpointWriter writer(dir + "/async", opt, true);
  std::vector<double> step_idle, step_writing, copy_ms, stall_ms;
  for (int s = 1; s <= steps; ++s) {
    bool writing = writer.busy();
    auto t0 = Clock::now();
    fake_step(buf, iters);
    (writing ? step_writing : step_idle).push_back(ms_since(t0));
    if (s % every == 0) {
      auto c0 = Clock::now();
      CheckpointData copy = host_copy(state);
      copy.ints["step"] = s;
      copy_ms.push_back(ms_since(c0));
      stall_ms.push_back(writer.save(s, std::move(copy)).stall_ms);
    }
  }
  writer.wait();
  std::vector<double> async_write;
  for (auto& r : writer.take_completed()) async_write.push_back(r.write_ms);
  double step_ms = median(step_idle);
  o.str("");
  o << "simulated step: " << step_ms << " ms idle, " << median(step_writing) << " ms while a write runs;  host copy "
    << median(copy_ms) << " ms;  save() stall " << median(stall_ms) << " ms ("
    << 100 * median(stall_ms) / step_ms << "% of a step)";
  log_raw_out(o.str());

  nlohmann::json j;
  j["benchmark"] = "checkpoint";
  j["command"] = "hpctrain bench checkpoint --dir " + dir + " --repeats " + std::to_string(repeats) + " --steps " +
                 std::to_string(steps) + " --every " + std::to_string(every) + " --step-ms " +
                 std::to_string(static_cast<int>(step_ms_target));
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  j["host"] = host;
  j["cores"] = std::thread::hardware_concurrency();
  j["load_average_1min_at_start"] = load_start;
  j["load_average_1min_at_end"] = load_1min();
  j["state"] = {{"model", "resnet18_cifar"}, {"parameters", nparams}, {"tensors", state.tensors.size()},
                {"payload_bytes", payload}, {"file_bytes", file_bytes}};
  j["write"] = {{"repeats", repeats},
                {"plain_write_fsync_ms", plain},
                {"checkpoint_write_ms", ckpt},
                {"plain_write_fsync_ms_median", plain_ms},
                {"plain_file_unlink_ms_median", median(plain_unlink)},
                {"checkpoint_write_ms_median", ckpt_ms},
                {"checkpoint_parts_ms_median",
                 {{"file_written_and_closed", median(data_ms)},
                  {"fsync", median(fsync_ms)},
                  {"rename_dirfsync_latest", median(publish_ms)},
                  {"prune_older_checkpoints", median(prune_ms)}}},
                {"checkpoint_write_without_prune_ms", unpruned},
                {"checkpoint_write_without_prune_ms_median", median(unpruned)},
                {"ratio_without_prune_over_plain", median(unpruned) / plain_ms},
                {"ratio_checkpoint_over_plain", ckpt_ms / plain_ms},
                {"plain_MB_per_s", payload / 1e3 / plain_ms},
                {"checkpoint_MB_per_s", file_bytes / 1e3 / ckpt_ms},
                {"verified_read_ms", build[0]}};
  j["async"] = {{"steps", steps},
                {"every_steps", every},
                {"step_ms_idle_median", step_ms},
                {"step_ms_while_writing_median", median(step_writing)},
                {"host_copy_ms", copy_ms},
                {"save_stall_ms", stall_ms},
                {"save_stall_ms_median", median(stall_ms)},
                {"stall_percent_of_step", 100 * median(stall_ms) / step_ms},
                {"background_write_ms", async_write}};
  if (!out.empty()) {
    fs::path op(out);
    if (op.has_parent_path()) fs::create_directories(op.parent_path());
    std::ofstream f(out);
    f << j.dump(2) << "\n";
    log_raw_out("wrote " + out);
  }
  fs::remove_all(dir);
  return kExitOk;
}

}  // namespace ht
