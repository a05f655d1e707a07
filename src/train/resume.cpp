#include "src/train/resume.hpp"

#include <mpi.h>
#include <signal.h>
#include <unistd.h>
#include <string.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "cuda/check.hpp"
#include "io/metrics.hpp"
#include "mpi/dist.hpp"
#include "src/train/config.hpp"
#include "src/train/sgd.hpp"
#include "src/train/signals.hpp"
#include "src/train/trainer.hpp"

namespace fs = std::filesystem;

namespace ht {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// ---- CheckpointData <-> bytes, for the broadcast from rank 0 ----------------------------------
void put_u64(std::vector<char>& b, uint64_t v) { b.insert(b.end(), reinterpret_cast<char*>(&v), reinterpret_cast<char*>(&v) + 8); }
void put_str(std::vector<char>& b, const std::string& s) {
  put_u64(b, s.size());
  b.insert(b.end(), s.begin(), s.end());
}
struct Reader {
  const std::vector<char>& b;
  size_t pos = 0;
  uint64_t u64() {
    uint64_t v;
    std::memcpy(&v, b.data() + pos, 8);
    pos += 8;
    return v;
  }
  std::string str() {
    size_t n = u64();
    std::string s(b.data() + pos, n);
    pos += n;
    return s;
  }
};

std::vector<char> serialize(const CheckpointData& d) {
  std::vector<char> b;
  b.reserve(d.payload_bytes() + 4096);
  put_u64(b, d.tensors.size());
  for (auto& [n, t] : d.tensors) {
    put_str(b, n);
    put_u64(b, t.shape().size());
    for (auto s : t.shape()) put_u64(b, static_cast<uint64_t>(s));
    const char* p = static_cast<const char*>(t.raw());
    b.insert(b.end(), p, p + t.nbytes());
  }
  put_u64(b, d.ints.size());
  for (auto& [k, v] : d.ints) put_str(b, k), put_u64(b, static_cast<uint64_t>(v));
  put_u64(b, d.floats.size());
  for (auto& [k, v] : d.floats) {
    uint64_t u;
    std::memcpy(&u, &v, 8);
    put_str(b, k), put_u64(b, u);
  }
  put_u64(b, d.strings.size());
  for (auto& [k, v] : d.strings) put_str(b, k), put_str(b, v);
  return b;
}

CheckpointData deserialize(const std::vector<char>& b) {
  CheckpointData d;
  Reader r{b};
  for (uint64_t n = r.u64(), i = 0; i < n; ++i) {
    std::string name = r.str();
    std::vector<int64_t> shape(r.u64());
    for (auto& s : shape) s = static_cast<int64_t>(r.u64());
    Tensor t = Tensor::empty(shape);
    std::memcpy(t.raw(), b.data() + r.pos, t.nbytes());
    r.pos += t.nbytes();
    d.tensors.emplace_back(std::move(name), std::move(t));
  }
  for (uint64_t n = r.u64(), i = 0; i < n; ++i) {
    std::string k = r.str();
    d.ints[k] = static_cast<int64_t>(r.u64());
  }
  for (uint64_t n = r.u64(), i = 0; i < n; ++i) {
    std::string k = r.str();
    uint64_t u = r.u64();
    double v;
    std::memcpy(&v, &u, 8);
    d.floats[k] = v;
  }
  for (uint64_t n = r.u64(), i = 0; i < n; ++i) {
    std::string k = r.str();
    d.strings[k] = r.str();
  }
  return d;
}

void bcast_bytes(std::vector<char>& b) {
  uint64_t n = b.size();
  HT_MPI_CHECK(MPI_Bcast(&n, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD));
  b.resize(n);
  const uint64_t piece = uint64_t(1) << 30;
  for (uint64_t off = 0; off < n; off += piece)
    HT_MPI_CHECK(MPI_Bcast(b.data() + off, static_cast<int>(std::min(piece, n - off)), MPI_CHAR, 0, MPI_COMM_WORLD));
}
void bcast_string(std::string& s) {
  std::vector<char> b(s.begin(), s.end());
  bcast_bytes(b);
  s.assign(b.begin(), b.end());
}

std::string fnv_hex(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string signal_name(int s) {
  const char* abbrev = sigabbrev_np(s);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(s);
}

}  // namespace

CheckpointArgs parse_checkpoint_args(const std::vector<std::string>& extra) {
  CheckpointArgs a;
  for (size_t i = 0; i < extra.size(); ++i) {
    const std::string& x = extra[i];
    if (x == "--reset-head") {
      a.reset_head = true;
    } else if (x == "--init-from") {
      if (i + 1 >= extra.size() || extra[i + 1].rfind("--", 0) == 0)
        throw UsageError("hpctrain train: --init-from needs a checkpoint path");
      a.init_from = extra[++i];
    } else if (x.rfind("--init-from=", 0) == 0) {
      a.init_from = x.substr(12);
    } else {
      throw UsageError("hpctrain train: unknown argument '" + x + "' (config keys are --section.key; others: "
                       "--init-from CHECKPOINT, --reset-head)");
    }
  }
  if (a.reset_head && a.init_from.empty())
    throw UsageError("hpctrain train: --reset-head needs --init-from CHECKPOINT");
  return a;
}

std::vector<std::string> head_param_names(const std::vector<std::string>& names, const std::vector<int>& ndims) {
  for (size_t i = names.size(); i-- > 0;) {
    const std::string& n = names[i];
    if (ndims[i] == 2 && n.size() > 7 && n.substr(n.size() - 7) == ".weight") {
      std::string bias = n.substr(0, n.size() - 7) + ".bias";
      std::vector<std::string> out{n};
      for (auto& m : names)
        if (m == bias) out.push_back(bias);
      return out;
    }
  }
  return {};
}

CheckpointManager::CheckpointManager(Trainer& trainer, CheckpointArgs args) : t_(trainer), args_(std::move(args)) {
  rank_ = dist().rank;
  world_ = dist().world_size;
  const auto& c = t_.config().checkpoint;
  install_stop_signals(c.signals);
  if (rank_ == 0) {
    CheckpointWriteOptions o;
    o.keep_last = c.keep_last;
    o.keep_every = c.keep_every;
    writer_ = std::make_unique<CheckpointWriter>(t_.config().run.dir, o, c.async);
  }
  if (c.every_minutes > 0) interval_s_ = c.every_minutes * 60;
  if (c.mtbf_minutes > 0) need_measure_ = true;
  last_save_time_ = Clock::now();
  t_.set_checkpoint_hooks({[this] { return step_end(); }, [this](TrainSummary& s) { run_end(s); }});
}

CheckpointManager::~CheckpointManager() {
  t_.set_checkpoint_hooks({});
  if (writer_) {
    try {
      writer_->wait();
    } catch (const std::exception& e) {
      if (!failed_) std::cerr << "hpctrain: " << e.what() << "\n";  // (run_end reported it already)
    }
  }
  restore_stop_signals();
}

void CheckpointManager::start() {
  const Config& cfg = t_.config();
  const std::string& dir = cfg.run.dir;
  std::string err;
  int err_kind = 0;  // 1 usage (exit 2), 2 runtime (exit 1)
  std::string mode = "fresh", from;
  std::vector<char> blob;
  if (rank_ == 0) {
    try {
      auto warn = [](const std::string& w) { std::cerr << "hpctrain: warning: " << w << "\n" << std::flush; };
      if (cfg.run.fresh && !list_checkpoints(dir).empty()) {
        char stamp[32];
        std::snprintf(stamp, sizeof stamp, "%lld", static_cast<long long>(std::time(nullptr)));
        fs::path aside = fs::path(dir) / ("checkpoints.before-fresh-" + std::string(stamp));
        fs::rename(checkpoint_dir(dir), aside);
        fs::remove(fs::path(dir) / "LATEST");
        std::cout << "hpctrain: run.fresh: previous checkpoints moved to " << aside.string() << "\n";
      }
      for (auto& p : clean_temporary_files(dir)) warn("removed leftover temporary file " + p + " (an interrupted write)");
      bool had_any = !list_checkpoints(dir).empty();
      auto loaded = load_latest_checkpoint(dir, true, warn);
      if (loaded) {
        const CheckpointData& d = loaded->data;
        std::string model = d.strings.count("model") ? d.strings.at("model") : "?";
        int64_t gb = d.get_int("global_batch", loaded->path);
        if (!cfg.run.allow_config_change && (model != cfg.model.name || gb != cfg.train.global_batch))
          throw UsageError("run.dir = " + dir + ": checkpoint " + loaded->path + " was saved with model.name = " + model +
                           ", train.global_batch = " + std::to_string(gb) + "; this config has model.name = " +
                           cfg.model.name + ", train.global_batch = " + std::to_string(cfg.train.global_batch) +
                           ". Pass --run.allow_config_change to resume anyway, or --run.fresh to start over");
        mode = "resume";
        from = loaded->path;
        blob = serialize(d);
      } else if (had_any) {
        throw UsageError("run.dir = " + dir + ": no checkpoint in " + checkpoint_dir(dir) +
                         " is valid (each was reported above); rerun with --run.fresh to start over");
      } else if (!args_.init_from.empty()) {
        mode = "init";
        from = args_.init_from;
        blob = serialize(read_checkpoint_file(args_.init_from));
      }
      // Free space for one checkpoint (plus the one being replaced is already on disk).
      CheckpointData probe;
      probe.tensors = t_.state_tensors();
      std::error_code ec;
      fs::create_directories(checkpoint_dir(dir), ec);
      check_free_space(checkpoint_dir(dir), checkpoint_expected_bytes(probe));
    } catch (const UsageError& e) {
      err = e.what();
      err_kind = 1;
    } catch (const std::exception& e) {
      err = e.what();
      err_kind = 2;
    }
  }
  if (world_ > 1) {
    HT_MPI_CHECK(MPI_Bcast(&err_kind, 1, MPI_INT, 0, MPI_COMM_WORLD));
    bcast_string(err);
  }
  if (err_kind == 1) throw UsageError(err);
  if (err_kind == 2) throw RuntimeError(err);
  if (world_ > 1) {
    bcast_string(mode);
    bcast_string(from);
    bcast_bytes(blob);
  }
  if (mode == "fresh") return;
  CheckpointData d = deserialize(blob);
  blob.clear();
  blob.shrink_to_fit();
  if (mode == "init") {
    std::vector<std::string> skip;
    if (args_.reset_head) {
      std::vector<std::string> names;
      std::vector<int> nd;
      for (auto& p : t_.model().params().params()) names.push_back(p.name), nd.push_back(static_cast<int>(p.shape.size()));
      skip = head_param_names(names, nd);
    }
    t_.load_state_tensors(d.tensors, true, skip);
    if (rank_ == 0) {
      std::cout << "hpctrain: initialised parameters from " << from;
      if (!skip.empty()) {
        std::cout << " (head reset:";
        for (auto& s : skip) std::cout << " " << s;
        std::cout << ")";
      }
      std::cout << "; training starts at step 0\n" << std::flush;
    }
    return;
  }
  t_.load_state_tensors(d.tensors, false);
  TrainProgress& p = t_.progress();
  p.step = d.get_int("step", from);
  p.epoch = static_cast<int>(d.get_int("epoch", from));
  p.step_in_epoch = d.get_int("step_in_epoch", from);
  p.nonfinite_in_row = d.ints.count("nonfinite_in_row") ? d.ints.at("nonfinite_in_row") : 0;
  p.nonfinite_total = d.ints.count("nonfinite_total") ? d.ints.at("nonfinite_total") : 0;
  last_saved_step_ = p.step;
  int64_t saved_world = d.ints.count("world_size") ? d.ints.at("world_size") : 0;
  if (rank_ == 0) {
    double lr = learning_rate(cfg.optim, p.step, t_.total_steps(), t_.steps_per_epoch());
    std::printf("hpctrain: resumed from %s: step %lld, epoch %d (step %lld of %lld in the epoch), lr %.6g, "
                "saved with world_size %lld, now %d\n",
                from.c_str(), static_cast<long long>(p.step), p.epoch + 1, static_cast<long long>(p.step_in_epoch),
                static_cast<long long>(t_.steps_per_epoch()), lr, static_cast<long long>(saved_world), world_);
    if (d.strings.count("config") && d.strings.at("config") != to_ini(cfg))
      std::printf("hpctrain: note: the config differs from the one saved in the checkpoint\n");
    std::fflush(stdout);
    if (auto* m = t_.metrics())
      m->write({{"event", "resume"}, {"path", from}, {"step", p.step}, {"epoch", p.epoch + 1},
                {"step_in_epoch", p.step_in_epoch}, {"lr", lr}, {"saved_world_size", saved_world},
                {"world_size", world_}});
  }
}

CheckpointData CheckpointManager::collect() {
  const Config& cfg = t_.config();
  auto& ps = t_.model().params();
  CheckpointData d;
  if (rank_ == 0) d.tensors = t_.state_tensors();
  // BatchNorm running statistics differ per rank (each saw its own samples): save their average.
  Tensor& fb = ps.flat_buffers();
  if (world_ > 1 && fb.defined() && fb.numel() > 0) {
    Tensor host = fb.to(Device::cpu);
    std::vector<float> sum(static_cast<size_t>(host.numel()));
    HT_MPI_CHECK(MPI_Reduce(host.data<float>(), sum.data(), static_cast<int>(sum.size()), MPI_FLOAT, MPI_SUM, 0,
                            MPI_COMM_WORLD));
    if (rank_ == 0) {
      for (auto& b : ps.buffers()) {
        Tensor* dst = nullptr;
        for (auto& [n, t] : d.tensors)
          if (n == "buffer/" + b.name) dst = &t;
        if (!dst) continue;
        float* o = dst->data<float>();
        for (int64_t i = 0; i < dst->numel(); ++i)
          o[i] = sum[static_cast<size_t>(b.offset + i)] / static_cast<float>(world_);
      }
    }
  }
  if (rank_ != 0) return d;
  const TrainProgress& p = t_.progress();
  d.ints = {{"step", p.step},
            {"epoch", p.epoch},
            {"step_in_epoch", p.step_in_epoch},
            {"world_size", world_},
            {"seed", static_cast<int64_t>(cfg.run.seed)},
            {"global_batch", cfg.train.global_batch},
            {"total_steps", t_.total_steps()},
            {"steps_per_epoch", t_.steps_per_epoch()},
            {"nonfinite_in_row", p.nonfinite_in_row},
            {"nonfinite_total", p.nonfinite_total}};
  d.floats = {{"lr", learning_rate(cfg.optim, p.step, t_.total_steps(), t_.steps_per_epoch())}, {"loss_scale", 1.0}};
  std::string ini = to_ini(cfg);
  d.strings = {{"model", cfg.model.name}, {"config", ini}, {"config_hash", fnv_hex(ini)}};
  return d;
}

void CheckpointManager::save(bool sync, const std::string& reason) {
  const int64_t step = t_.progress().step;
  auto t0 = Clock::now();
  CheckpointData d = collect();
  last_saved_step_ = step;
  last_save_time_ = Clock::now();
  if (rank_ != 0) return;
  double copy_ms = ms_since(t0);
  pending_[step] = {copy_ms, 0, reason};
  try {
    auto st = writer_->save(step, std::move(d));
    pending_[step].stall_ms = st.stall_ms;
    if (sync) writer_->wait();
  } catch (const std::exception& e) {
    failed_ = true;
    fail_message_ = e.what();
  }
  report_completed();
}

void CheckpointManager::update_interval(double cost_s) {
  const auto& c = t_.config().checkpoint;
  if (c.mtbf_minutes <= 0) return;
  double old = interval_s_;
  cost_s_ = cost_s_ > 0 ? 0.5 * (cost_s_ + cost_s) : cost_s;
  interval_s_ = young_daly_interval_s(cost_s_, c.mtbf_minutes * 60);
  if (old <= 0 || std::fabs(interval_s_ - old) > 0.2 * old) {
    std::printf("hpctrain: checkpoint interval (Young/Daly): sqrt(2 x C %.3f s x MTBF %.1f min) = %.1f s\n", cost_s_,
                c.mtbf_minutes, interval_s_);
    std::fflush(stdout);
    if (auto* m = t_.metrics())
      m->write({{"event", "checkpoint_interval"}, {"rule", "young_daly"}, {"cost_s", cost_s_},
                {"mtbf_minutes", c.mtbf_minutes}, {"interval_s", interval_s_}});
  }
}

void CheckpointManager::report_completed() {
  if (rank_ != 0) return;
  for (auto& r : writer_->take_completed()) {
    int64_t step = checkpoint_step_from_name(fs::path(r.path).filename().string());
    Pending p = pending_.count(step) ? pending_[step] : Pending{};
    pending_.erase(step);
    if (auto* m = t_.metrics())
      m->write({{"event", "checkpoint"}, {"step", step}, {"path", r.path}, {"bytes", r.bytes},
                {"write_ms", r.write_ms}, {"copy_ms", p.copy_ms}, {"stall_ms", p.stall_ms}, {"reason", p.reason},
                {"removed", r.removed}});
    update_interval((p.copy_ms + p.stall_ms + r.write_ms) / 1000.0);
  }
}

bool CheckpointManager::step_end() {
  const Config& cfg = t_.config();
  const TrainProgress& p = t_.progress();
  // Test hook: a real signal raised on one rank (the handler sets the flag like any delivery).
  if (!raised_ && cfg.checkpoint.test_signal_at_step >= 0 && p.step == cfg.checkpoint.test_signal_at_step &&
      rank_ == cfg.checkpoint.test_signal_rank) {
    raised_ = true;
    // Process-directed, as a real delivery (raise() targets this thread, which blocks it); the
    // receiver thread takes it asynchronously, so wait (bounded) for the flag to keep the test exact.
    ::kill(::getpid(), SIGTERM);
    for (int i = 0; i < 2000 && !stop_requested(); ++i) ::usleep(1000);
  }
  uint32_t local = stop_requested() ? kFlagStop : 0u;
  if (rank_ == 0) {
    report_completed();
    if (!writer_->error().empty()) local |= kFlagWriteFailed;
    if (interval_s_ > 0 && std::chrono::duration<double>(Clock::now() - last_save_time_).count() >= interval_s_)
      local |= kFlagCheckpoint;
  }
  const uint32_t flags = world_ > 1 ? agree_step_flags(local) : local;
  if (flags & kFlagWriteFailed) {
    failed_ = true;
    if (rank_ == 0) fail_message_ = writer_->error();
    return true;
  }
  if (flags & kFlagStop) {
    stop_ = true;
    return true;
  }
  if (p.step >= t_.total_steps() || p.step == last_saved_step_) return false;  // the final save is run_end's
  const int64_t every = cfg.checkpoint.every_steps;
  if (need_measure_) {
    need_measure_ = false;
    save(false, "young_daly_measure");
  } else if (flags & kFlagCheckpoint) {
    save(false, cfg.checkpoint.mtbf_minutes > 0 ? "young_daly" : "every_minutes");
  } else if (every > 0 && p.step % every == 0) {
    save(false, "every_steps");
  }
  return false;
}

void CheckpointManager::run_end(TrainSummary& s) {
  const TrainProgress& p = t_.progress();
  if (!failed_) {
    if (p.step != last_saved_step_) {
      save(true, stop_ ? "signal" : "final");
    } else if (rank_ == 0) {
      try {
        writer_->wait();
      } catch (const std::exception& e) {
        failed_ = true;
        fail_message_ = e.what();
      }
      report_completed();
    }
    uint32_t f = failed_ ? kFlagWriteFailed : 0u;
    if (world_ > 1) f = agree_step_flags(f);
    failed_ = (f & kFlagWriteFailed) != 0;
  }
  if (failed_) {
    s.exit_code = kExitRuntime;
    s.status = "checkpoint_failed";
    // One write per message: ranks share the terminal, and a line must not be cut by another rank's.
    std::string msg = rank_ == 0 ? "hpctrain: fatal (rank 0, step " + std::to_string(p.step) + "): " + fail_message_ +
                                       "\nhpctrain: every rank stops; the previous checkpoint and LATEST are kept\n"
                                 : "hpctrain: rank " + std::to_string(rank_) + " stops at step " +
                                       std::to_string(p.step) + ": rank 0 could not write a checkpoint\n";
    std::cerr << msg << std::flush;
    return;
  }
  if (stop_) {
    s.exit_code = kExitStopped;
    s.status = "stopped";
    if (rank_ == 0) {
      std::string sig = stop_signal() ? signal_name(stop_signal()) : std::string("a signal on another rank");
      std::printf("hpctrain: stopped by %s after step %lld: checkpoint %s saved; rerun the same command to resume "
                  "(exit code 75)\n",
                  sig.c_str(), static_cast<long long>(p.step),
                  checkpoint_path(t_.config().run.dir, p.step).c_str());
      std::fflush(stdout);
    }
  }
}

}  // namespace ht
