// The training run: epochs of steps, evaluation after each epoch, and the step itself, which reads
// top to bottom: data -> forward -> backward with bucketed gradient exchange -> non-finite check ->
// optimizer -> metrics; then evaluation and the replica check. Set-up is in trainer_setup.cpp, the
// checkpoint state in trainer_state.cpp.
#include "src/train/trainer.hpp"

#include <cmath>
#include <cstdio>
#include <optional>

#include "io/checkpoint/checkpoint_store.hpp"
#include "cuda/cuda_context.hpp"
#include "mpi/dist.hpp"
#include "mpi/whereabouts.hpp"
#include "base/clock.hpp"
#include "base/hash.hpp"
#include "base/log.hpp"
#include "src/train/build_info.hpp"
#include "src/train/precision.hpp"
#include "src/ops/cpu_precision.hpp"
#include "src/ops/elementwise.hpp"
#include "src/ops/softmax_xent.hpp"

namespace ht {

namespace {
std::string fmt_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  long t = static_cast<long>(s + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
  return buf;
}

}  // namespace

const char* to_string(RunStatus s) {
  switch (s) {
    case RunStatus::finished: return "finished";
    case RunStatus::stopped: return "stopped";
    case RunStatus::budget: return "budget";
    case RunStatus::slow_rank: return "slow_rank";
    case RunStatus::checkpoint_failed: return "checkpoint_failed";
  }
  return "?";
}

TrainSummary Trainer::run() {
  const auto run_t0 = SteadyClock::now();
  write_run_start();
  budget_->begin(run_t0);
  run_start_step_ = prog_.step;
  train_s_ = 0;
  bool stop = prog_.step >= total_steps_;
  if (stop && cfg_.train.eval) evaluate_final_again();
  bool interrupted = false;  // stopped at a step boundary by the checkpoint manager
  for (int epoch = prog_.epoch; !stop && (cfg_.train.epochs == 0 || epoch < cfg_.train.epochs); ++epoch) {
    prog_.epoch = epoch;
    train_loader_->start_epoch(epoch, prog_.step_in_epoch);
    staged_ = false;
    if (feeder_) feeder_->reset();
    while (step(epoch)) {
      // Periodic saves and stops agreed by all ranks (a signal, the budget, a failed write).
      bool checkpoint_stop = false;
      if (checkpoints_) {
        PhaseTimer phase(trace_, "checkpoint");
        checkpoint_stop = checkpoints_->step_end();
      }
      if (checkpoint_stop) interrupted = true;
      if (checkpoint_stop || prog_.step >= total_steps_) {
        stop = true;
        break;
      }
    }
    end_epoch(epoch, stop, interrupted);
  }
  summary_.steps = prog_.step;
  if (checkpoints_) {
    PhaseTimer phase(trace_, "checkpoint");
    checkpoints_->run_end(summary_);  // final or stop checkpoint; may set exit code 75, 3 or 1
  }
  if (trace_.enabled()) trace_.write(cfg_.run.dir);  // collective: rank 0 writes run.dir/trace.json
  write_run_end(seconds_since(run_t0));
  return summary_;
}

bool Trainer::step(int epoch) {
  // The step's own clock: step_ms (without the metrics) and the trace's "step" span (with them).
  const auto t0 = SteadyClock::now();
  const int64_t trace_t0 = trace_.enabled() ? trace_.now_us() : 0;
  // ---- data ----
  note_step(prog_.step + 1);  // where this rank is, for the peers' probes (mpi/whereabouts.hpp)
  StepMetrics m;
  Tensor images, labels;
  {
    PhaseTimer phase(trace_, "data", m.data_ms);
    if (!next_batch(images, labels)) return false;
  }
  m.step = prog_.step + 1;
  m.epoch = epoch + 1;
  m.lr = learning_rate(cfg_.optim, prog_.step, total_steps_, steps_per_epoch_);
  // ---- forward, backward (with several ranks, gradient buckets averaged while it runs) ----
  const LocalPass local = forward_backward(images, labels, m);
  // ---- the last buckets, then the non-finite check, agreed by every rank ----
  const bool finite = exchange_and_check(local, m);
  if (scaler_) finish_loss_scale(finite, m);  // unscale, then grow or back off
  // ---- optimizer, or a skipped step (BatchNorm running statistics restored) ----
  if (finite) {
    optimizer_step(m);
  } else {
    model_->params().flat_buffers().copy_from(buffers_backup_);
    m.skipped = true;
  }
  m.step_ms = ms_since(t0);
  m.images_per_s = m.step_ms > 0 ? cfg_.train.global_batch / (m.step_ms / 1000) : 0.0;
  // ---- metrics ----
  advance_progress(m);
  record_step(m, trace_t0);
  return true;
}

bool Trainer::next_batch(Tensor& images, Tensor& labels) {
  if (!take_batch(images, labels)) return false;
  faults_.on_batch(prog_.step, images);  // HT_TEST_FAULTS (base/test_faults.hpp); nothing without it
  return true;
}

bool Trainer::take_batch(Tensor& images, Tensor& labels) {
#if defined(HT_HAVE_CUDA)
  if (device_ == Device::cuda) {
    if (!feeder_) feeder_ = std::make_unique<cuda::H2DFeeder>();
    if (!staged_) {
      if (!train_loader_->next(host_batch_)) return false;
      feeder_->stage(host_batch_.images, host_batch_.labels);
    }
    feeder_->take(images, labels);
    // Stage the following batch now, so its copy overlaps this step's compute.
    staged_ = train_loader_->next(host_batch_);
    if (staged_) feeder_->stage(host_batch_.images, host_batch_.labels);
    return true;
  }
#endif
  if (!train_loader_->next(host_batch_)) return false;
  images = host_batch_.images;
  labels = host_batch_.labels;
  return true;
}


Trainer::LocalPass Trainer::forward_backward(const Tensor& images, const Tensor& labels, StepMetrics& m) {
  auto& ps = model_->params();
  const int A = cfg_.train.accumulation_steps;
  const int mb = micro_batch_;
  LocalPass local;
  // BatchNorm running statistics are restored if the step is skipped.
  {
    TraceSpan s(trace_, "backup_buffers");
    buffers_backup_.copy_from(ps.flat_buffers());
  }
  if (bucketer_) {
    unscale_fused_ = scaler_ && bucketer_->set_unscale(static_cast<float>(scaler_->scale()));
    bucketer_->begin_step();
  }
  for (int a = 0; a < A; ++a) {
    // The batch is already on the compute device (take_batch); micro-batches are views of it.
    const Tensor x = images.narrow0(int64_t{a} * mb, int64_t{a + 1} * mb);
    const Tensor y = labels.narrow0(int64_t{a} * mb, int64_t{a + 1} * mb);
    PassOptions po;
    po.training = true;
    po.accumulate = a > 0;
    const Tensor* logits = nullptr;
    {
      PhaseTimer phase(trace_, "forward", m.forward_ms);
      logits = &model_->forward(x, po);
      probs_.ensure(logits->shape(), DType::f32, device_);
      const double loss = softmax_xent_forward(*logits, y, cfg_.train.label_smoothing, probs_, nullptr);
      local.loss += loss / A;
      if (!std::isfinite(loss)) local.nonfinite = true;
    }
    PhaseTimer phase(trace_, "backward", m.backward_ms);
    dlogits_.ensure(logits->shape(), DType::f32, device_);
    // Mean over the micro-batch, then / A: the sum over micro-batches is the rank's batch mean.
    // With loss scaling the seed is scaled too (the loss times the scale, without a pass over it).
    softmax_xent_backward(probs_, y, cfg_.train.label_smoothing, loss_seed(A), dlogits_);
    // Only the last micro-batch's gradients are final: that backward feeds the buckets.
    const bool last = a == A - 1;
    if (last && bucketer_) ps.on_grad_ready = [this](int i) { bucketer_->mark_ready(i); };
    model_->backward(dlogits_, po);
    ps.on_grad_ready = nullptr;
    // GPU work is asynchronous: without gradient buckets nothing overlaps the end of backward (the
    // next forward or the non-finite check waits for it anyway), so waiting here costs nothing and
    // makes backward_ms the real backward time rather than its launch time. With buckets the
    // remaining backward compute shows in allreduce_ms (finish() waits for it).
    if (device_ == Device::cuda && !bucketer_) cuda::synchronize();
  }
  return local;
}

bool Trainer::exchange_and_check(const LocalPass& local, StepMetrics& m) {
  {
    PhaseTimer phase(trace_, "allreduce_wait", m.allreduce_ms, "comm");
    if (bucketer_) bucketer_->finish();
  }
  TraceSpan span(trace_, "nonfinite_check");
  // The loss reported is the global batch mean; a non-finite loss or gradient anywhere skips the
  // step on every rank together.
  const bool local_bad = local.nonfinite || count_nonfinite(model_->params().flat_grads()) > 0;
  const bool any_bad = world_ > 1 ? dist_any(local_bad) : local_bad;
  const double global_loss = world_ > 1 ? dist_sum(local.loss) / world_ : local.loss;
  if (std::isfinite(global_loss)) m.loss = global_loss;
  if (!any_bad) summary_.last_loss = global_loss;
  return !any_bad;
}

// Loss scaling (src/train/loss_scaler.hpp): the backward seed, the unscale of the averaged gradients
// and the scale's update once every rank agreed on the step's finiteness.
float Trainer::loss_seed(int accumulation_steps) const {
  // scale / A equals (1 / A) x scale exactly: the scale is a power of two.
  const float scale = scaler_ ? static_cast<float>(scaler_->scale()) : 1.0f;
  return scale / static_cast<float>(accumulation_steps);
}

void Trainer::finish_loss_scale(bool finite, StepMetrics& m) {
  m.loss_scale = scaler_->scale();
  // The exchange divided by world_size x scale already when the communicator fuses it (MPI);
  // otherwise (one rank, NCCL without it) one pass here. Exact either way: a power of two.
  if (finite && !unscale_fused_) scale_inplace(model_->params().flat_grads(), scaler_->inverse());
  m.loss_scale_backoff = scaler_->update(!finite);
}

void Trainer::optimizer_step(StepMetrics& m) {
  PhaseTimer phase(trace_, "optimizer", m.optimizer_ms);
  opt_->step(static_cast<float>(m.lr));
  if (device_ == Device::cuda) cuda::synchronize();  // optimizer_ms is the update's time, not its launch
}

void Trainer::advance_progress(const StepMetrics& m) {
  train_s_ += m.step_ms / 1000;
  prog_.step_in_epoch++;
  if (!m.skipped) {
    prog_.step++;
    prog_.nonfinite_in_row = 0;
    return;
  }
  // The skipped step's samples are consumed: the step counter does not move, so the schedule is
  // unchanged, but the cursor does.
  // A skip that halved the loss scale is the scaler's search, not a run going wrong: it does not
  // count towards train.max_nonfinite_steps.
  if (!m.loss_scale_backoff) prog_.nonfinite_in_row++;
  prog_.nonfinite_total++;
  if (rank_ == 0 && m.loss_scale_backoff)
    log_info(strf("[epoch %d] step %lld skipped: non-finite gradient at loss scale %g, halved", m.epoch,
                  static_cast<long long>(m.step), m.loss_scale.value_or(0)));
  else if (rank_ == 0)
    log_info(strf("[epoch %d] step %lld skipped: non-finite loss or gradient (%lld in a row, limit %d)", m.epoch,
                  static_cast<long long>(m.step), static_cast<long long>(prog_.nonfinite_in_row),
                  cfg_.train.max_nonfinite_steps));
  if (prog_.nonfinite_in_row >= cfg_.train.max_nonfinite_steps)
    throw RuntimeError("step " + std::to_string(m.step) + ": " + std::to_string(prog_.nonfinite_in_row) +
                       " steps in a row had a non-finite loss or gradient (train.max_nonfinite_steps = " +
                       std::to_string(cfg_.train.max_nonfinite_steps) + "); lower optim.lr or check the data");
}

void Trainer::record_step(StepMetrics& m, int64_t trace_begin_us) {
  {
    TraceSpan span(trace_, "metrics");
    if (cfg_.dist.check_replicas_every > 0 && prog_.step % cfg_.dist.check_replicas_every == 0)
      m.replicas_identical = check_replicas();
    if (nvml_) m.gpu = nvml_->snapshot();
    if (rank_ == 0) {
      metrics_->write(step_record(m));
      if (!m.skipped && (prog_.step % cfg_.train.log_every_steps == 0 || prog_.step == total_steps_))
        log_progress(m, train_s_ * static_cast<double>(prog_.step) / std::max<int64_t>(1, prog_.step - run_start_step_));
    }
    budget_->on_step(m.step_ms);
    watchdog_->on_step(m, metrics_.get());  // collective once per watchdog.window_steps
  }
  if (trace_.enabled()) trace_.record("step", "step", trace_begin_us, trace_.now_us(), prog_.step);
}

void Trainer::log_progress(const StepMetrics& m, double elapsed_s) {
  const int64_t done = prog_.step;
  const double eta = done > 0 ? elapsed_s / static_cast<double>(done) * static_cast<double>(total_steps_ - done) : NAN;
  log_info(strf("[epoch %d] step %lld/%lld loss %.4f lr %.5g %.0f img/s ETA %s%s", prog_.epoch + 1,
                static_cast<long long>(done), static_cast<long long>(total_steps_), m.loss.value_or(NAN), m.lr,
                m.images_per_s, fmt_duration(eta).c_str(), budget_->console_text().c_str()));
}

void Trainer::end_epoch(int epoch, bool stop, bool interrupted) {
  if (interrupted) return;
  if (!stop || prog_.step_in_epoch >= steps_per_epoch_) {
    // Epoch finished.
    if (cfg_.train.eval) evaluate(epoch);
    prog_.step_in_epoch = 0;
    prog_.epoch = epoch + 1;
  } else if (cfg_.train.eval) {
    // train.max_steps ended the run inside an epoch: still report the test accuracy reached.
    evaluate(epoch);
  }
}

// ---- evaluation and the replica check: read-only passes over the model, both collective ----

bool Trainer::check_replicas() {
  // FNV-1a over the parameter bytes; every rank must hold exactly rank 0's parameters.
  Tensor host = model_->params().flat_values().to(Device::cpu);
  Fnv1a fnv;
  fnv.update(host.raw(), host.nbytes());
  const uint64_t h = fnv.value();
  const auto [lo, hi] = dist_min_max(h, "replica check (MPI_Allreduce)");
  if (lo != hi)
    throw RuntimeError("step " + std::to_string(prog_.step) + ": parameters differ between ranks (rank " +
                       std::to_string(rank_) + " hash " + std::to_string(h) + ")");
  return true;
}

void Trainer::evaluate(int epoch) {
  double ms = 0;
  double loss_sum = 0, correct = 0, count = 0;
  {
    PhaseTimer phase(trace_, "evaluate", ms);
    evaluate_pass(loss_sum, correct, count);
  }
  summary_.test_loss = count > 0 ? loss_sum / count : 0;
  summary_.test_top1 = count > 0 ? correct / count : 0;
  if (rank_ == 0) {
    log_info(strf("[epoch %d] test loss %.4f top1 %.4f over %.0f samples (%.1f s)", epoch + 1, summary_.test_loss,
                  summary_.test_top1, count, ms / 1000));
    metrics_->write({{"event", "eval"}, {"epoch", epoch + 1}, {"step", prog_.step}, {"loss", summary_.test_loss},
                     {"top1", summary_.test_top1}, {"samples", static_cast<int64_t>(count)}, {"eval_ms", ms}});
  }
}

void Trainer::evaluate_pass(double& loss_sum, double& correct, double& count) {
  // Running statistics differ per rank (each saw its own samples): average them first.
  auto& bufs = model_->params().flat_buffers();
  if (world_ > 1) comm_->allreduce_average(std::span<float>(bufs.data<float>(), static_cast<size_t>(bufs.numel())));
  test_loader_->start_epoch(0);
  Batch b;
  PassOptions po;
  po.training = false;
  while (test_loader_->next(b)) {
    const Tensor* x = &b.images;
    const Tensor* y = &b.labels;
    if (device_ != Device::cpu) {
      x_dev_.ensure(b.images.shape(), DType::f32, device_);
      y_dev_.ensure(b.labels.shape(), DType::i32, device_);
      x_dev_.copy_from(b.images);
      y_dev_.copy_from(b.labels);
      x = &x_dev_;
      y = &y_dev_;
    }
    const Tensor& logits = model_->forward(*x, po);
    probs_.ensure(logits.shape(), DType::f32, device_);
    int64_t c = 0;
    const double l = softmax_xent_forward(logits, *y, 0.f, probs_, &c);
    const double n = static_cast<double>(b.labels.numel());
    loss_sum += l * n;
    correct += static_cast<double>(c);
    count += n;
  }
  loss_sum = dist_sum(loss_sum);
  correct = dist_sum(correct);
  count = dist_sum(count);
}

void Trainer::evaluate_final_again() {
  // The epoch the last step belongs to (0-based): the one just finished, or the one max_steps ended inside.
  const int epoch = prog_.step_in_epoch == 0 && prog_.epoch > 0 ? prog_.epoch - 1 : prog_.epoch;
  if (rank_ == 0)
    log_info(strf("resumed at the final step %lld: evaluating the final model again for the run's record",
                  static_cast<long long>(prog_.step)));
  evaluate(epoch);  // its own "evaluate" phase in the trace
}

void Trainer::write_run_start() {
  if (rank_ != 0) return;
  const BuildInfo build = build_info();
  metrics_->write({{"event", "run_start"},
                   {"config", to_ini(cfg_)},
                   {"world_size", world_},
                   {"hosts", dist().hosts},
                   {"devices", device_name(device_)},
                   {"compute_dtype", dtype_name(model_->spec().compute)},
                   {"cpu_isa", onednn_cpu_isa()},
                   {"micro_batch", micro_batch_},
                   {"steps_per_epoch", steps_per_epoch_},
                   {"total_steps", total_steps_},
                   {"parameters", model_->params().num_params()},
                   {"resumed_from_step", prog_.step},
                   {"build", build_json(build)},
                   {"libraries", libraries_json(build)}});
}

void Trainer::write_run_end(double wall_s) {
  summary_.wall_s = wall_s;
  if (rank_ != 0) return;
  nlohmann::json end = {{"event", "run_end"}, {"status", to_string(summary_.status)}, {"exit_code", summary_.exit_code},
                        {"steps", prog_.step}, {"wall_s", summary_.wall_s}, {"train_s", train_s_},
                        {"nonfinite_steps", prog_.nonfinite_total}, {"test_top1", summary_.test_top1},
                        {"test_loss", summary_.test_loss}, {"peak_rss_bytes", peak_rss_bytes()}};
  end.update(budget_->fields());  // wall_hours, gpu_hours, cost of the whole run so far
  metrics_->write(end);
  // The end of the console says what a user needs next: where everything went and the next command.
  std::string text = (summary_.status == RunStatus::finished ? std::string("done") : to_string(summary_.status)) + ": " +
                     std::to_string(prog_.step) + " steps";
  if (run_start_step_ > 0) text += " (" + std::to_string(prog_.step - run_start_step_) + " in this start)";
  char buf[160];
  std::snprintf(buf, sizeof buf, " in %.1f s", summary_.wall_s);
  text += buf;
  if (summary_.test_top1 >= 0) {
    std::snprintf(buf, sizeof buf, ", test top1 %.4f", summary_.test_top1);
    text += buf;
  }
  text += ",";  // appended piecewise: GCC 12's -Wrestrict false positive on "," + std::string&&
  text += budget_->console_text() + "\n";
  const auto saved = list_checkpoints(cfg_.run.dir);
  text += "run directory: " + cfg_.run.dir + " (config.ini, metrics.jsonl" +
          (saved.empty() ? std::string(", no checkpoint") : "; last checkpoint " + saved.back().second) + ")\n";
  if (summary_.status == RunStatus::stopped || summary_.status == RunStatus::budget ||
      summary_.status == RunStatus::slow_rank)
    text += "next: rerun the same command to resume from step " + std::to_string(prog_.step) +
            "; hpctrain report " + cfg_.run.dir + " shows the run so far\n";
  else if (summary_.status == RunStatus::finished)
    text += "next: hpctrain report " + cfg_.run.dir + "\n";
  log_info(text);
}

}  // namespace ht
