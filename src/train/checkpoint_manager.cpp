// CheckpointManager: start-up (fresh / resume / --init-from), step-boundary agreement and periodic
// saves, and the final or stop checkpoint with its exit code. The state itself is the Trainer's
// (capture_state / restore_state); timing is CheckpointSchedule's; files are io's.
#include "src/train/checkpoint_manager.hpp"

#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <type_traits>
#include <filesystem>
#include <vector>

#include "io/checkpoint/checkpoint_store.hpp"
#include "io/metrics.hpp"
#include "mpi/communicator.hpp"
#include "mpi/dist.hpp"
#include "base/log.hpp"
#include "base/test_faults.hpp"
#include "src/train/config.hpp"
#include "src/train/file_vetting.hpp"
#include "src/train/sgd.hpp"
#include "src/train/signals.hpp"
#include "src/train/trainer.hpp"
#include "base/clock.hpp"
#include "src/train/training_state.hpp"

namespace fs = std::filesystem;

namespace ht {
namespace {

using Clock = std::chrono::steady_clock;

// Rank 0's `s` on every rank (collective).
void share(Communicator& comm, std::string& s) {
  std::vector<char> b(s.begin(), s.end());
  comm.broadcast_bytes(b, 0);
  s.assign(b.begin(), b.end());
}

// Rank 0's enum value on every rank (collective).
template <class E>
  requires std::is_enum_v<E>
void share(Communicator& comm, E& e) {
  std::vector<char> b(1, static_cast<char>(e));
  comm.broadcast_bytes(b, 0);
  e = static_cast<E>(b.at(0));
}

std::string signal_name(int s) {
  const char* abbrev = sigabbrev_np(s);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(s);
}

/// What the shell sees after a stop by signal (exit 75): under mpirun, Open MPI prints its "job has
/// been aborted" banner for any non-zero exit (75 included), and after a TERM to mpirun it kills the
/// ranks and returns 1.
std::string stop_exit_note() {
  const bool under_mpirun = std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr;
  return !under_mpirun ? "exit code 75"
         : stop_signal() == SIGTERM
             ? "exit code 75; mpirun itself returns 1 after a TERM (send USR1 to mpirun for 75), after its "
               "'job has been aborted' notice"
             : "exit code 75, mpirun's too, after Open MPI's 'job has been aborted' notice, which it prints for "
               "any non-zero exit";
}

}  // namespace

struct CheckpointManager::StartPlan {
  enum class Mode : uint8_t { fresh, resume, init };
  Mode mode = Mode::fresh;
  std::string from;             ///< the checkpoint resumed or initialised from
  std::vector<std::string> config_changes;  ///< resume: keys whose saved value differs ("key A -> B")
  TrainingState state;          ///< rank 0: the state to restore (resume, init)
};

CheckpointManager::CheckpointManager(Trainer& trainer, CheckpointArgs args)
    : t_(trainer),
      cfg_(trainer.config()),
      prog_(trainer.progress()),
      metrics_(trainer.metrics()),
      total_steps_(trainer.total_steps()),
      steps_per_epoch_(trainer.steps_per_epoch()),
      args_(std::move(args)),
      schedule_(cfg_.checkpoint.every_steps, cfg_.checkpoint.every_minutes, cfg_.checkpoint.mtbf_minutes,
                Clock::now()) {
  rank_ = dist().rank;
  world_ = dist().world_size;
  const auto& c = cfg_.checkpoint;
  // Test-only self-signal (HT_TEST_FAULTS signal_at_step, signal_rank).
  const TestFaults& faults = TestFaults::get();
  signal_at_step_ = faults.integer("signal_at_step", -1);
  signal_rank_ = faults.integer("signal_rank", 0);
  if (rank_ == 0) {
    CheckpointWriteOptions o;
    o.keep_last = c.keep_last;
    o.keep_every = c.keep_every;
    writer_ = std::make_unique<CheckpointWriter>(cfg_.run.dir, o, c.async);
  }
}

CheckpointManager::~CheckpointManager() {
  if (writer_) {
    try {
      writer_->wait();
    } catch (const std::exception& e) {
      if (!failed_) log_raw_err(std::string("hpctrain: ") + e.what());  // (run_end reported it already)
    }
  }
  retire_stop_signals();
}

CheckpointManager::StartPlan CheckpointManager::plan_start() {
  StartPlan plan;
  const std::string& dir = cfg_.run.dir;
  if (cfg_.run.fresh && !list_checkpoints(dir).empty()) {
    char stamp[32];
    std::snprintf(stamp, sizeof stamp, "%lld", static_cast<long long>(std::time(nullptr)));
    fs::path aside = fs::path(dir) / ("checkpoints.before-fresh-" + std::string(stamp));
    fs::rename(checkpoint_dir(dir), aside);
    fs::remove(fs::path(dir) / "LATEST");
    log_info("hpctrain: run.fresh: previous checkpoints moved to " + aside.string());
  }
  for (auto& p : clean_temporary_files(dir))
    log_warn_job("removed leftover temporary file " + p + " (an interrupted write)");
  bool had_any = !list_checkpoints(dir).empty();
  // Every candidate is vetted in a child process first: a checkpoint, even one this run wrote, is
  // untrusted input to HDF5 (src/train/file_vetting.hpp).
  const VetOptions vet = vet_options(cfg_);
  auto vet_child = [&](const std::string& p) { vet_file_or_throw(p, vet); };
  // Every tensor is checked against the model, and the counters against each other, before any of
  // its data is read (the file's sizes are untrusted until then).
  CheckpointExpectation expect;
  expect.run_dir = dir;
  expect.model = cfg_.model.name;
  expect.global_batch = cfg_.train.global_batch;
  expect.allow_config_change = cfg_.run.allow_config_change;
  expect.tensors = t_.state_tensor_shapes();
  auto check = [&expect](const CheckpointLayout& l, const std::string& path) {
    return checkpoint_run_problem(l, path, expect);
  };
  std::vector<std::string> rejected;
  auto loaded = load_latest_checkpoint(dir, true, log_warn_job, check, &rejected, vet_child);
  if (loaded) {
    const CheckpointData& d = loaded->data;
    plan.mode = StartPlan::Mode::resume;
    plan.from = loaded->path;
    if (d.strings.count("config") && d.strings.at("config") != to_ini(cfg_)) {
      try {
        for (const auto& c : config_differences(parse_config_text(d.strings.at("config"), plan.from), cfg_))
          plan.config_changes.push_back(c.key + " " + c.from + " -> " + c.to);
      } catch (const UsageError& e) {  // saved by another version: say so rather than guess
        plan.config_changes = {std::string("(the saved config does not parse here: ") + e.what() + ")"};
      }
    }
    plan.state = training_state_from_checkpoint(std::move(loaded->data), loaded->path);
  } else if (had_any) {
    std::string why;
    for (const auto& r : rejected) why += "\n  " + r;
    throw UsageError("run.dir = " + dir + ": no checkpoint in " + checkpoint_dir(dir) + " is valid:" + why +
                     "\nrerun with --run.fresh to start over (the checkpoints are moved aside, not deleted)");
  } else if (!args_.init_from.empty()) {
    plan.mode = StartPlan::Mode::init;
    plan.from = args_.init_from;
    vet_file_or_throw(args_.init_from, vet);
    expect.resume = false;
    if (args_.reset_head)
      for (const auto& n : t_.head_param_names()) expect.any_shape.push_back(state_tensor_name(StateGroup::param, n));
    plan.state = training_state_from_checkpoint(read_checkpoint_file(args_.init_from, check), args_.init_from,
                                                /*require_progress=*/false);
  }
  // Free space for one checkpoint (plus the one being replaced is already on disk).
  CheckpointData probe;
  probe.tensors = t_.state_tensors();
  if (world_ > 1) {  // the per-rank buffers (capture_state)
    const size_t n = probe.tensors.size();
    std::string name;
    for (int r = 0; r < world_; ++r)
      for (size_t i = 0; i < n; ++i)
        if (StateGroup g; parse_state_tensor_name(probe.tensors[i].first, &g, &name) && g == StateGroup::buffer)
          probe.tensors.emplace_back(rank_buffer_name(r, name), probe.tensors[i].second);
  }
  std::error_code ec;
  fs::create_directories(checkpoint_dir(dir), ec);
  check_free_space(checkpoint_dir(dir), checkpoint_expected_bytes(probe));
  return plan;
}

void CheckpointManager::start() {
  Communicator& comm = t_.communicator();
  std::string err;
  enum class Failure : uint8_t { none, usage, runtime } failure = Failure::none;  // exit 2, exit 1
  StartPlan plan;
  if (rank_ == 0) {
    try {
      plan = plan_start();
    } catch (const UsageError& e) {
      err = e.what();
      failure = Failure::usage;
    } catch (const std::exception& e) {
      err = e.what();
      failure = Failure::runtime;
    }
  }
  if (world_ > 1) {
    share(comm, failure);
    share(comm, err);
  }
  // Agreed by every rank: each exits 2 with the message, cleanly (no MPI_Abort racing the others' output).
  if (failure == Failure::usage) throw CollectiveUsageError(err, true);
  if (failure == Failure::runtime) throw RuntimeError(err);
  if (world_ > 1) {
    share(comm, plan.mode);
    share(comm, plan.from);
    if (plan.mode != StartPlan::Mode::fresh) {
      std::vector<char> blob;
      if (rank_ == 0) blob = serialize_training_state(plan.state);
      comm.broadcast_bytes(blob, 0);
      if (rank_ != 0) plan.state = deserialize_training_state(blob);
    }
  }
  if (plan.mode == StartPlan::Mode::fresh) return;
  if (plan.mode == StartPlan::Mode::init) {
    const auto skip = t_.restore_state(plan.state, args_.reset_head ? RestoreScope::params_reset_head
                                                                    : RestoreScope::params);
    if (rank_ == 0) {
      std::string line = "hpctrain: initialised parameters from " + plan.from;
      if (!skip.empty()) {
        line += " (head reset:";
        for (auto& s : skip) line += " " + s;
        line += ")";
      }
      log_info(line + "; training starts at step 0");
    }
    return;
  }
  t_.restore_state(plan.state, RestoreScope::full);
  const TrainProgress& p = prog_;
  last_saved_step_ = p.step;
  const int64_t saved_world = plan.state.world_size;
  if (rank_ == 0) {
    double lr = learning_rate(cfg_.optim, p.step, total_steps_, steps_per_epoch_);
    log_info(strf("hpctrain: resumed from %s: step %lld, epoch %d (step %lld of %lld in the epoch), lr %.6g, "
                  "saved with world_size %lld, now %d",
                  plan.from.c_str(), static_cast<long long>(p.step), p.epoch + 1,
                  static_cast<long long>(p.step_in_epoch), static_cast<long long>(steps_per_epoch_), lr,
                  static_cast<long long>(saved_world), world_));
    if (!plan.config_changes.empty()) {
      std::string list;
      for (const auto& c : plan.config_changes) list += (list.empty() ? "" : ", ") + c;
      log_info("hpctrain: note: the config differs from the one saved in the checkpoint: " + list);
    }
    if (!args_.init_from.empty())
      log_info(strf("hpctrain: note: ignoring --init-from %s: run.dir = %s has checkpoints, so this run resumes at "
                    "step %lld (a new run.dir, or --run.fresh true, starts from %s instead)",
                    args_.init_from.c_str(), cfg_.run.dir.c_str(), static_cast<long long>(p.step),
                    args_.init_from.c_str()));
    const int64_t saved_total = plan.state.total_steps;
    if (saved_total > 0 && saved_total != total_steps_ && cfg_.optim.schedule != LrSchedule::constant) {
      // The schedule is a function of the planned length: a changed train.max_steps or train.epochs
      // re-stretches it from here on, which a user resuming "to train a bit longer" rarely expects.
      const double lr_saved_plan = learning_rate(cfg_.optim, p.step, saved_total, steps_per_epoch_);
      log_warn_job(strf("the %s learning-rate schedule was planned over %lld steps when %s was "
                       "saved and is now planned over %lld steps (train.max_steps or train.epochs changed): at step "
                       "%lld the learning rate moves from %.6g (saved plan) to %.6g. Resume with the saved "
                       "train.max_steps / train.epochs to keep the schedule",
                       to_string(cfg_.optim.schedule), static_cast<long long>(saved_total), plan.from.c_str(),
                       static_cast<long long>(total_steps_), static_cast<long long>(p.step), lr_saved_plan, lr));
    }
    if (world_ > 1 && saved_world == world_ && !has_rank_buffers(plan.state) && !t_.model().params().buffers().empty())
      log_info("hpctrain: note: " + plan.from +
               " holds no per-rank buffers (checkpoint format version 1): every rank starts from the ranks' average "
               "running statistics, so this resume is not bitwise exact");
    if (metrics_)
      metrics_->write({{"event", "resume"}, {"path", plan.from}, {"step", p.step}, {"epoch", p.epoch + 1},
                       {"step_in_epoch", p.step_in_epoch}, {"lr", lr}, {"saved_world_size", saved_world},
                       {"world_size", world_}, {"total_steps", total_steps_},
                       {"saved_total_steps", plan.state.total_steps}});
  }
}

void CheckpointManager::save(bool sync, CheckpointReason reason) {
  const int64_t step = prog_.step;
  auto t0 = Clock::now();
  TrainingState state = t_.capture_state();  // collective
  last_saved_step_ = step;
  schedule_.mark_saved(Clock::now());
  if (rank_ == 0) save_on_rank0(std::move(state), sync, reason, t0);
  // Every rank waits here, with no time limit, for rank 0's part of the save (the host copy, a stall
  // behind the previous write, a synchronous write): a slow save is not a failed peer, and the next
  // step's time-limited gradient exchange (dist.timeout_s) starts only once rank 0 is back.
  if (world_ > 1) dist_barrier();
}

void CheckpointManager::save_on_rank0(TrainingState state, bool sync, CheckpointReason reason,
                                      std::chrono::steady_clock::time_point t0) {
  const int64_t step = prog_.step;
  CheckpointData d = to_checkpoint_data(std::move(state));
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

void CheckpointManager::report_completed() {
  if (rank_ != 0) return;
  for (auto& r : writer_->take_completed()) {
    int64_t step = checkpoint_step_from_name(fs::path(r.path).filename().string());
    Pending p = pending_.count(step) ? pending_[step] : Pending{};
    pending_.erase(step);
    if (metrics_)
      metrics_->write({{"event", "checkpoint"}, {"step", step}, {"path", r.path}, {"bytes", r.bytes},
                       {"write_ms", r.write_ms}, {"copy_ms", p.copy_ms}, {"stall_ms", p.stall_ms},
                       {"reason", to_string(p.reason)}, {"removed", r.removed}});
    t_.budget().set_checkpoint_cost_s((p.copy_ms + p.stall_ms + r.write_ms) / 1000.0);  // the final save's forecast
    if (auto change = schedule_.record_cost((p.copy_ms + p.stall_ms + r.write_ms) / 1000.0)) {
      log_info(strf("hpctrain: checkpoint interval (Young/Daly) for C %.3f s and MTBF %.1f min: %.1f s",
                    change->cost_s, schedule_.mtbf_minutes(), change->interval_s));
      if (metrics_)
        metrics_->write({{"event", "checkpoint_interval"}, {"rule", "young_daly"}, {"cost_s", change->cost_s},
                         {"mtbf_minutes", schedule_.mtbf_minutes()}, {"interval_s", change->interval_s}});
    }
  }
}

void CheckpointManager::raise_test_signal() {
  if (raised_ || signal_at_step_ < 0 || prog_.step != signal_at_step_ || rank_ != signal_rank_) return;
  raised_ = true;
  // A real signal, raised on one rank (the handler sets the flag like any delivery). Process-directed,
  // as a real delivery (raise() targets this thread, which blocks it); the receiver thread takes it
  // asynchronously, so wait (bounded) for the flag to keep the test exact.
  ::kill(::getpid(), SIGTERM);
  for (int i = 0; i < 2000 && !stop_requested(); ++i) ::usleep(1000);
}

bool CheckpointManager::step_end() {
  raise_test_signal();
  uint32_t local = stop_requested() ? kFlagStop : 0u;
  if (rank_ == 0) {
    report_completed();
    if (!writer_->error().empty()) local |= kFlagWriteFailed;
    if (schedule_.time_due(Clock::now())) local |= kFlagCheckpoint;
    // Budget (src/train/budget.hpp): stop while one more step and the checkpoint still fit.
    if (prog_.step < total_steps_ && budget_reason_.empty())
      if (auto why = t_.budget().would_cross()) budget_reason_ = *why, local |= kFlagBudget;
    if (prog_.step < total_steps_ && slow_reason_.empty())
      if (auto why = t_.watchdog().slow_rank_stop()) slow_reason_ = *why, local |= kFlagSlowRank;
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
  if (flags & kFlagBudget) {
    budget_stop_ = true;
    return true;
  }
  if (flags & kFlagSlowRank) {
    slow_stop_ = true;
    return true;
  }
  if (prog_.step >= total_steps_ || prog_.step == last_saved_step_) return false;  // the final save is run_end's
  if (auto reason = schedule_.decide(prog_.step, (flags & kFlagCheckpoint) != 0)) save(false, *reason);
  return false;
}

void CheckpointManager::run_end(TrainSummary& s) {
  const TrainProgress& p = prog_;
  if (!failed_) {
    if (p.step != last_saved_step_) {
      save(true, stop_ ? CheckpointReason::signal
               : budget_stop_ ? CheckpointReason::budget
               : slow_stop_   ? CheckpointReason::slow_rank
                              : CheckpointReason::final);
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
    // Unbounded while every peer answers: rank 0 may still be finishing a long write.
    if (world_ > 1)
      f = dist_bitwise_or(f, "final checkpoint agreement (rank 0 finishes its write)", WaitKind::while_peers_answer);
    failed_ = (f & kFlagWriteFailed) != 0;
  }
  if (failed_) {
    s.exit_code = kExitRuntime;
    s.status = RunStatus::checkpoint_failed;
    // One write per message: ranks share the terminal, and a line must not be cut by another rank's.
    std::string msg = rank_ == 0 ? "hpctrain: fatal (rank 0, step " + std::to_string(p.step) + "): " + fail_message_ +
                                       "\nhpctrain: every rank stops; the previous checkpoint and LATEST are kept\n"
                                 : "hpctrain: rank " + std::to_string(rank_) + " stops at step " +
                                       std::to_string(p.step) + ": rank 0 could not write a checkpoint\n";
    log_raw_err(msg);
    return;
  }
  const long long step = static_cast<long long>(p.step);
  const std::string saved = checkpoint_path(cfg_.run.dir, p.step);
  auto stop_with = [&](ExitCode code, RunStatus status, const std::string& rank0_line) {
    s.exit_code = code;
    s.status = status;
    if (rank_ == 0) log_info(rank0_line);
  };
  if (stop_) {
    const std::string sig = stop_signal() ? signal_name(stop_signal()) : std::string("a signal on another rank");
    stop_with(kExitStopped, RunStatus::stopped,
              strf("hpctrain: stopped by %s after step %lld: checkpoint %s saved; rerun the same command to resume "
                   "(%s)",
                   sig.c_str(), step, saved.c_str(), stop_exit_note().c_str()));
  } else if (budget_stop_) {
    stop_with(kExitBudget, RunStatus::budget,
              strf("hpctrain: budget: %s: stopped after step %lld, checkpoint %s saved; raise the limit and rerun "
                   "the same command to resume (exit code 3)",
                   budget_reason_.c_str(), step, saved.c_str()));
  } else if (slow_stop_) {
    stop_with(kExitSlowRank, RunStatus::slow_rank,
              strf("hpctrain: slow rank: %s: stopped after step %lld, checkpoint %s saved; rerun the same command "
                   "without that host to resume (sbatch --exclude=HOST; exit code 4)",
                   slow_reason_.c_str(), step, saved.c_str()));
  }
}

}  // namespace ht
