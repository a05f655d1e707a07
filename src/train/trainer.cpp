// The training loop, top to bottom: set-up, then per step data -> forward -> backward with
// bucketed gradient averaging -> non-finite check -> optimizer -> metrics; evaluation each epoch.
#include "src/train/trainer.hpp"

#include <omp.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include "cuda/check.hpp"
#include "cuda/cuda_context.hpp"
#include "cuda/gpu_env.hpp"
#include "mpi/dist.hpp"
#include "src/ops/elementwise.hpp"
#include "src/ops/softmax_xent.hpp"
#include "src/train/device_select.hpp"

namespace fs = std::filesystem;

namespace ht {

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

std::string fmt_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  long t = static_cast<long>(s + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
  return buf;
}

std::string library_versions_json_string() {
  unsigned maj = 0, min = 0, rel = 0;
  H5get_libversion(&maj, &min, &rel);
  const dnnl_version_t* dv = dnnl_version();
  char mpi[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0;
  MPI_Get_library_version(mpi, &len);
  std::string m(mpi, static_cast<size_t>(len));
  if (auto nl = m.find('\n'); nl != std::string::npos) m.resize(nl);
  nlohmann::json j = {{"hdf5", std::to_string(maj) + "." + std::to_string(min) + "." + std::to_string(rel)},
                      {"onednn", std::to_string(dv->major) + "." + std::to_string(dv->minor) + "." + std::to_string(dv->patch)},
                      {"mpi", m}};
  return j.dump();
}
}  // namespace

Trainer::Trainer(const Config& cfg) : cfg_(cfg) {
  const auto& d = dist();
  rank_ = d.rank;
  world_ = d.world_size;
  // Everything up to the model is local work that validates what every rank sees alike (config,
  // device, dataset shards, run directory): errors are agreed so that all ranks exit 2 together,
  // each naming the problem, instead of one rank aborting the others.
  int threads = 1;
  collective_usage_check([&] { setup_local(threads); });
  setup_distributed(threads);
}

void Trainer::setup_local(int& threads) {
  const auto& d = dist();
  // ---- Device and threads ----
  device_ = select_device(cfg_.train.device, d.local_rank, cfg_.dist.allow_shared_gpu);
  if (device_ == Device::cuda) {
    cuda::Options co;
    co.workspace_bytes = static_cast<size_t>(cfg_.cuda.workspace_mb) << 20;
    co.deterministic = cfg_.train.deterministic;
    co.allow_tf32 = cfg_.train.precision == "tf32";
    cuda::set_options(co);
  }
  if (cfg_.train.precision == "bf16" || cfg_.train.precision == "fp16")
    throw UsageError("train.precision = " + cfg_.train.precision +
                     ": mixed precision is not implemented yet; use fp32 (or tf32 on GPUs)");
  threads = cfg_.train.threads > 0 ? cfg_.train.threads : std::max(1, omp_get_num_procs() / std::max(1, d.local_size));
  if (!std::getenv("OMP_NUM_THREADS") || cfg_.train.threads > 0) omp_set_num_threads(threads);

  // ---- Batch arithmetic: global batch = world_size x micro-batch x accumulation steps ----
  const int denom = world_ * cfg_.train.accumulation_steps;
  if (cfg_.train.global_batch % denom != 0)
    throw UsageError("train.global_batch = " + std::to_string(cfg_.train.global_batch) +
                     ": must be divisible by world_size (" + std::to_string(world_) + ") x train.accumulation_steps (" +
                     std::to_string(cfg_.train.accumulation_steps) + ")");
  micro_batch_ = cfg_.train.global_batch / denom;

  // ---- Data ----
  if (cfg_.data.synthetic) {
    const auto& s = cfg_.data;
    train_ds_ = make_synthetic_dataset(s.synthetic_samples, s.synthetic_height, s.synthetic_width, s.synthetic_channels,
                                       s.synthetic_classes, cfg_.run.seed, "train");
    test_ds_ = make_synthetic_dataset(std::max<int64_t>(s.synthetic_samples / 4, 1), s.synthetic_height,
                                      s.synthetic_width, s.synthetic_channels, s.synthetic_classes, cfg_.run.seed, "test");
  } else {
    train_ds_ = open_sharded_dataset(cfg_.data.dir, "train");
    test_ds_ = open_sharded_dataset(cfg_.data.dir, "test");
  }
  const DatasetInfo& info = train_ds_->info();
  LoaderOptions lo;
  lo.global_batch = cfg_.train.global_batch;
  lo.rank = rank_;
  lo.world_size = world_;
  lo.seed = cfg_.run.seed;
  lo.train = true;
  lo.crop_padding = cfg_.data.crop_padding;
  lo.flip = cfg_.data.flip;
  lo.layout = Layout::NCHW;
  lo.prefetch = cfg_.data.prefetch;
  lo.limit = cfg_.data.limit_train;
  train_loader_ = std::make_unique<DataLoader>(train_ds_, lo);
  steps_per_epoch_ = train_loader_->steps_per_epoch();
  n_train_ = cfg_.data.limit_train > 0 ? std::min(cfg_.data.limit_train, info.num_samples) : info.num_samples;
  if (steps_per_epoch_ <= 0)
    throw UsageError("train.global_batch = " + std::to_string(cfg_.train.global_batch) + ": larger than the " +
                     std::to_string(n_train_) + " train samples, so an epoch has no step");
  LoaderOptions eo = lo;
  eo.train = false;
  eo.crop_padding = 0;
  eo.flip = false;
  eo.eval_batch = cfg_.train.eval_batch;
  eo.limit = cfg_.data.limit_test;
  test_loader_ = std::make_unique<DataLoader>(test_ds_, eo);
  total_steps_ = cfg_.train.epochs > 0 ? steps_per_epoch_ * cfg_.train.epochs : cfg_.train.max_steps;
  if (cfg_.train.max_steps > 0) total_steps_ = std::min(total_steps_, cfg_.train.max_steps);

  // ---- Model ----
  ModelSpec spec;
  spec.name = cfg_.model.name;
  spec.num_classes = cfg_.model.num_classes > 0 ? cfg_.model.num_classes : info.num_classes;
  spec.channels = info.channels;
  spec.height = info.height;
  spec.width = info.width;
  spec.mlp_hidden = cfg_.model.mlp_hidden;
  model_ = std::make_unique<Model>(spec, device_, cfg_.run.seed);
  opt_ = std::make_unique<Sgd>(model_->params(), cfg_.optim);

  // ---- Run directory (rank 0 writes it) ----
  if (rank_ == 0) {
    std::error_code ec;
    fs::create_directories(cfg_.run.dir, ec);
    if (ec) throw UsageError("run.dir = " + cfg_.run.dir + ": cannot create directory: " + ec.message());
  }
}

void Trainer::setup_distributed(int threads) {
  // ---- Communication: every rank starts from rank 0's parameters and buffers ----
  comm_ = make_communicator(device_, cfg_.dist.allow_shared_gpu, cfg_.dist.timeout_s);
  auto& ps = model_->params();
  auto span_of = [](Tensor& t) { return std::span<float>(t.data<float>(), static_cast<size_t>(t.numel())); };
  comm_->broadcast(span_of(ps.flat_values()), 0);
  comm_->broadcast(span_of(ps.flat_buffers()), 0);
  if (world_ > 1) {
    std::vector<ParamSlice> slices;
    for (const auto& p : ps.params()) slices.push_back({p.offset, shape_numel(p.shape)});
    bucketer_ = std::make_unique<GradBucketer>(*comm_, span_of(ps.flat_grads()), slices, cfg_.dist.bucket_mb);
  }
  buffers_backup_ = Tensor::empty(ps.flat_buffers().shape(), DType::f32, device_);

  // ---- NVML monitoring of the bound GPU (absent NVML: no fields) ----
  if (device_ == Device::cuda) {
    GpuEnv env = probe_gpu_env();
    const int ord = cuda::device();
    if (ord >= 0 && ord < static_cast<int>(env.devices.size()))
      nvml_ = std::make_unique<NvmlMonitor>(env.devices[static_cast<size_t>(ord)].uuid);
  }

  // ---- Timeline (trace.enabled): clocks aligned with rank 0; each bucket's allreduce is recorded on
  // the communication thread (bucket = operation number modulo the buckets per step) ----
  if (cfg_.trace.enabled) {
    trace_.enable(MPI_COMM_WORLD);
    trace_.set_thread_name("main");
    if (bucketer_) {
      const int nb = bucketer_->num_buckets();
      comm_->set_async_observer([this, nb](int64_t seq, Clock::time_point b, Clock::time_point e) {
        trace_.record("allreduce", "comm", trace_.to_trace_us(b), trace_.to_trace_us(e), seq % nb);
      });
    }
  }

  // ---- Effective config and metrics file (rank 0) ----
  if (rank_ == 0) {
    std::ofstream(fs::path(cfg_.run.dir) / "config.ini") << to_ini(cfg_);
    metrics_ = std::make_unique<MetricsWriter>((fs::path(cfg_.run.dir) / "metrics.jsonl").string());
    std::cout << "hpctrain: " << world_ << " rank(s), device " << device_name(device_) << ", model "
              << model_->spec().name << " (" << ps.num_params() << " parameters), global batch "
              << cfg_.train.global_batch << " = " << world_ << " x " << micro_batch_ << " x "
              << cfg_.train.accumulation_steps << " (world_size x micro-batch x accumulation), " << steps_per_epoch_
              << " steps/epoch";
    if (n_train_ % cfg_.train.global_batch)
      std::cout << " (last " << n_train_ % cfg_.train.global_batch
                << " samples of each epoch's permutation dropped: every rank runs the same steps)";
    std::cout << ", " << threads << " thread(s)/rank\n" << std::flush;
  }
  HT_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
}

Trainer::~Trainer() = default;

bool Trainer::next_batch(Tensor& images, Tensor& labels) {
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

bool Trainer::train_step(const Tensor& images, const Tensor& labels, nlohmann::json& rec) {
  auto& ps = model_->params();
  const int A = cfg_.train.accumulation_steps;
  const int m = micro_batch_;
  double fwd_ms = 0, bwd_ms = 0, local_loss = 0;
  bool local_nonfinite = false;
  // BatchNorm running statistics are restored if the step is skipped.
  {
    TraceSpan s(trace_, "backup_buffers");
    buffers_backup_.copy_from(ps.flat_buffers());
  }
  if (bucketer_) bucketer_->begin_step();
  for (int a = 0; a < A; ++a) {
    std::optional<TraceSpan> fwd_span(std::in_place, trace_, "forward");
    // The batch is already on the compute device (next_batch); micro-batches are views of it.
    const Tensor xs = images.narrow0(int64_t{a} * m, int64_t{a + 1} * m);
    const Tensor ys = labels.narrow0(int64_t{a} * m, int64_t{a + 1} * m);
    const Tensor* x = &xs;
    const Tensor* y = &ys;
    PassOptions po;
    po.training = true;
    po.accumulate = a > 0;
    auto t0 = Clock::now();
    const Tensor& logits = model_->forward(*x, po);
    probs_.ensure(logits.shape(), DType::f32, device_);
    const double loss = softmax_xent_forward(logits, *y, cfg_.train.label_smoothing, probs_, nullptr);
    fwd_ms += ms_since(t0);
    local_loss += loss / A;
    if (!std::isfinite(loss)) local_nonfinite = true;
    fwd_span.reset();
    TraceSpan bwd_span(trace_, "backward");
    t0 = Clock::now();
    dlogits_.ensure(logits.shape(), DType::f32, device_);
    // Mean over the micro-batch, then / A: the sum over micro-batches is the rank's batch mean.
    softmax_xent_backward(probs_, *y, cfg_.train.label_smoothing, 1.0f / static_cast<float>(A), dlogits_);
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
    bwd_ms += ms_since(t0);
  }
  std::optional<TraceSpan> wait_span(std::in_place, trace_, "allreduce_wait", "comm");
  auto t0 = Clock::now();
  double wait_ms = bucketer_ ? bucketer_->finish() : 0.0;
  const double allreduce_ms = ms_since(t0);
  wait_span.emplace(trace_, "nonfinite_check");
  (void)wait_ms;
  // The loss reported is the global batch mean; a non-finite loss or gradient anywhere skips the
  // step on every rank together.
  if (count_nonfinite(ps.flat_grads()) > 0) local_nonfinite = true;
  const bool any_bad = world_ > 1 ? dist_any(local_nonfinite) : local_nonfinite;
  const double global_loss = world_ > 1 ? dist_sum(local_loss) / world_ : local_loss;
  rec["forward_ms"] = fwd_ms;
  rec["backward_ms"] = bwd_ms;
  rec["allreduce_ms"] = allreduce_ms;
  rec["loss"] = std::isfinite(global_loss) ? nlohmann::json(global_loss) : nlohmann::json(nullptr);
  wait_span.reset();
  if (any_bad) {
    ps.flat_buffers().copy_from(buffers_backup_);
    rec["optimizer_ms"] = 0.0;
    return false;
  }
  TraceSpan opt_span(trace_, "optimizer");
  t0 = Clock::now();
  const float lr = learning_rate(cfg_.optim, prog_.step, total_steps_, steps_per_epoch_);
  opt_->step(lr);
  if (device_ == Device::cuda) cuda::synchronize();  // optimizer_ms is the update's time, not its launch
  rec["optimizer_ms"] = ms_since(t0);
  summary_.last_loss = global_loss;
  return true;
}

bool Trainer::check_replicas() {
  // FNV-1a over the parameter bytes; every rank must hold exactly rank 0's parameters.
  Tensor host = model_->params().flat_values().to(Device::cpu);
  const auto* p = static_cast<const unsigned char*>(host.raw());
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < host.nbytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
  uint64_t lo = h, hi = h;
  HT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD));
  HT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD));
  if (lo != hi)
    throw RuntimeError("step " + std::to_string(prog_.step) + ": parameters differ between ranks (rank " +
                       std::to_string(rank_) + " hash " + std::to_string(h) + ")");
  return true;
}

void Trainer::evaluate(int epoch) {
  auto t0 = Clock::now();
  // Running statistics differ per rank (each saw its own samples): average them first.
  auto& bufs = model_->params().flat_buffers();
  if (world_ > 1) comm_->allreduce_average(std::span<float>(bufs.data<float>(), static_cast<size_t>(bufs.numel())));
  double loss_sum = 0, correct = 0, count = 0;
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
  summary_.test_loss = count > 0 ? loss_sum / count : 0;
  summary_.test_top1 = count > 0 ? correct / count : 0;
  if (rank_ == 0) {
    const double ms = ms_since(t0);
    std::printf("[epoch %d] test loss %.4f top1 %.4f over %.0f samples (%.1f s)\n", epoch + 1, summary_.test_loss,
                summary_.test_top1, count, ms / 1000);
    std::fflush(stdout);
    metrics_->write({{"event", "eval"}, {"epoch", epoch + 1}, {"step", prog_.step}, {"loss", summary_.test_loss},
                     {"top1", summary_.test_top1}, {"samples", static_cast<int64_t>(count)}, {"eval_ms", ms}});
  }
}

void Trainer::log_progress(const nlohmann::json& rec, double elapsed_s) {
  const int64_t done = prog_.step;
  const double eta = done > 0 ? elapsed_s / static_cast<double>(done) * static_cast<double>(total_steps_ - done) : NAN;
  const double loss = rec["loss"].is_null() ? NAN : rec["loss"].get<double>();
  std::printf("[epoch %d] step %lld/%lld loss %.4f lr %.5g %.0f img/s ETA %s\n", prog_.epoch + 1,
              static_cast<long long>(done), static_cast<long long>(total_steps_), loss, rec["lr"].get<double>(),
              rec["images_per_s"].get<double>(), fmt_duration(eta).c_str());
  std::fflush(stdout);
}

TrainSummary Trainer::run() {
  const auto run_t0 = Clock::now();
  if (rank_ == 0) {
    metrics_->write({{"event", "run_start"},
                     {"config", to_ini(cfg_)},
                     {"world_size", world_},
                     {"hosts", dist().hosts},
                     {"devices", device_name(device_)},
                     {"micro_batch", micro_batch_},
                     {"steps_per_epoch", steps_per_epoch_},
                     {"total_steps", total_steps_},
                     {"parameters", model_->params().num_params()},
                     {"resumed_from_step", prog_.step},
                     {"libraries", nlohmann::json::parse(library_versions_json_string())}});
  }
  const int64_t start_step = prog_.step;
  double train_s = 0;
  bool stop = prog_.step >= total_steps_;
  bool interrupted = false;  // stopped by the checkpoint hook (signal, failed checkpoint write)
  for (int epoch = prog_.epoch; !stop && (cfg_.train.epochs == 0 || epoch < cfg_.train.epochs); ++epoch) {
    prog_.epoch = epoch;
    train_loader_->start_epoch(epoch, prog_.step_in_epoch);
    staged_ = false;
    if (feeder_) feeder_->reset();
    Tensor images, labels;
    for (;;) {
      auto t_step = Clock::now();
      const int64_t trace_step_begin = trace_.enabled() ? trace_.now_us() : 0;
      if (!next_batch(images, labels)) break;
      const double data_ms = ms_since(t_step);
      if (trace_.enabled()) trace_.record("data", "step", trace_step_begin, trace_.now_us());
      // Test hooks (train.fail_at_step, train.nan_at_step): a failing rank, a poisoned batch.
      if (prog_.step == cfg_.train.fail_at_step && rank_ == cfg_.train.fail_rank)
        throw RuntimeError("injected failure (train.fail_at_step) at step " + std::to_string(prog_.step));
      if (prog_.step == cfg_.train.nan_at_step && rank_ == cfg_.train.nan_rank && images.numel() > 0 &&
          !nan_injected_) {
        Tensor nan = Tensor::empty({1});
        nan.data<float>()[0] = NAN;
        images.slice_flat(0, {1}).copy_from(nan);  // on the compute device
        nan_injected_ = true;  // once: a skipped step does not advance the step counter
      }
      nlohmann::json rec = {{"event", "step"}, {"step", prog_.step + 1}, {"epoch", epoch + 1}};
      const float lr = learning_rate(cfg_.optim, prog_.step, total_steps_, steps_per_epoch_);
      const bool applied = train_step(images, labels, rec);
      const double step_ms = ms_since(t_step);
      train_s += step_ms / 1000;
      prog_.step_in_epoch++;
      if (applied) {
        prog_.step++;
        prog_.nonfinite_in_row = 0;
      } else {
        // The skipped step's samples are consumed: the step counter does not move, so the
        // schedule is unchanged, but the cursor does.
        prog_.nonfinite_in_row++;
        prog_.nonfinite_total++;
        if (rank_ == 0)
          std::printf("[epoch %d] step %lld skipped: non-finite loss or gradient (%lld in a row, limit %d)\n",
                      epoch + 1, static_cast<long long>(prog_.step + 1), static_cast<long long>(prog_.nonfinite_in_row),
                      cfg_.train.max_nonfinite_steps);
        if (prog_.nonfinite_in_row >= cfg_.train.max_nonfinite_steps)
          throw RuntimeError("step " + std::to_string(prog_.step + 1) + ": " + std::to_string(prog_.nonfinite_in_row) +
                             " steps in a row had a non-finite loss or gradient (train.max_nonfinite_steps = " +
                             std::to_string(cfg_.train.max_nonfinite_steps) + "); lower optim.lr or check the data");
      }
      std::optional<TraceSpan> tail_span(std::in_place, trace_, "metrics");
      if (cfg_.dist.check_replicas_every > 0 && prog_.step % cfg_.dist.check_replicas_every == 0)
        rec["replicas_identical"] = check_replicas();
      rec["lr"] = lr;
      rec["skipped"] = !applied;
      rec["data_ms"] = data_ms;
      rec["step_ms"] = step_ms;
      rec["images_per_s"] = step_ms > 0 ? cfg_.train.global_batch / (step_ms / 1000) : 0.0;
      if (nvml_)
        for (const auto& [k, v] : nvml_->snapshot().fields()) rec[k] = v;
      if (rank_ == 0) {
        metrics_->write(rec);
        if (applied && (prog_.step % cfg_.train.log_every_steps == 0 || prog_.step == total_steps_))
          log_progress(rec, train_s * static_cast<double>(prog_.step) / std::max<int64_t>(1, prog_.step - start_step));
      }
      tail_span.reset();
      if (trace_.enabled()) trace_.record("step", "step", trace_step_begin, trace_.now_us(), prog_.step);
      // ---- checkpoint hook (src/train/resume.cpp): periodic saves; stop signals agreed by all ranks ----
      bool hook_stop = false;
      if (hooks_.step_end) {
        TraceSpan ck_span(trace_, "checkpoint");
        hook_stop = hooks_.step_end();
      }
      if (hook_stop) {
        interrupted = true;
        stop = true;
        break;
      }
      // ---- end checkpoint hook ----
      if (prog_.step >= total_steps_) {
        stop = true;
        break;
      }
    }
    if (!interrupted && (!stop || prog_.step_in_epoch >= steps_per_epoch_)) {
      // Epoch finished.
      if (cfg_.train.eval) {
        TraceSpan s(trace_, "evaluate");
        evaluate(epoch);
      }
      prog_.step_in_epoch = 0;
      prog_.epoch = epoch + 1;
    } else if (!interrupted && stop && cfg_.train.eval) {
      // train.max_steps ended the run inside an epoch: still report the test accuracy reached.
      TraceSpan s(trace_, "evaluate");
      evaluate(epoch);
    }
  }
  summary_.steps = prog_.step;
  if (hooks_.run_end) {
    TraceSpan ck_span(trace_, "checkpoint");
    hooks_.run_end(summary_);  // final or stop checkpoint; may set exit code 75 or 1
  }
  if (trace_.enabled()) trace_.write(cfg_.run.dir);  // collective: rank 0 writes run.dir/trace.json
  summary_.wall_s = std::chrono::duration<double>(Clock::now() - run_t0).count();
  if (rank_ == 0) {
    metrics_->write({{"event", "run_end"}, {"status", summary_.status}, {"exit_code", summary_.exit_code}, {"steps", prog_.step},
                     {"wall_s", summary_.wall_s}, {"train_s", train_s}, {"nonfinite_steps", prog_.nonfinite_total},
                     {"test_top1", summary_.test_top1}, {"test_loss", summary_.test_loss}});
    std::printf("%s: %lld steps in %.1f s", summary_.status == "finished" ? "done" : summary_.status.c_str(), static_cast<long long>(prog_.step), summary_.wall_s);
    if (summary_.test_top1 >= 0) std::printf(", test top1 %.4f", summary_.test_top1);
    std::printf("\n");
    std::fflush(stdout);
  }
  return summary_;
}

}  // namespace ht
