// Trainer set-up, in the order it runs: test faults, device, batch arithmetic, data, model and
// optimizer, run directory (local work whose usage errors all ranks agree on); then communication,
// monitoring and the run files (collective).
#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cuda/cuda_context.hpp"
#include "cuda/gpu_env.hpp"
#include "base/hash.hpp"
#include "mpi/gpu/communicator_factory.hpp"
#include "mpi/dist.hpp"
#include "mpi/flight_recorder.hpp"
#include "base/clock.hpp"
#include "base/log.hpp"
#include "base/test_faults.hpp"
#include "src/train/precision.hpp"
#include "src/train/device_select.hpp"
#include "src/train/file_vetting.hpp"
#include "src/train/launch_check.hpp"
#include "src/train/stage.hpp"
#include "src/train/trainer.hpp"

namespace fs = std::filesystem;

namespace ht {

Trainer::Trainer(const Config& cfg, std::optional<CheckpointArgs> checkpoints) : cfg_(cfg) {
  const auto& d = dist();
  rank_ = d.rank;
  world_ = d.world_size;
  check_launch_environment_collective();  // srun without --mpi=pmix, ranks of several jobs: exit 2
  // Everything up to the model is local work that validates what every rank sees alike (config,
  // device, dataset shards, run directory): errors are agreed so that all ranks exit 2 together,
  // each naming the problem, instead of one rank aborting the others.
  // The shards are vetted in child processes first (src/train/file_vetting.hpp): a file HDF5 cannot
  // parse must crash or hang a child, not this rank. Collective; bad files: exit 2 on every rank.
  data_dir_ = stage_dataset(cfg_);  // data.stage_dir: one rank per node copies the shards (collective)
  if (!cfg_.data.synthetic) {
    const VetSummary v = vet_files_collective(dataset_shard_files(data_dir_), vet_options(cfg_));
    if (rank_ == 0 && v.files > 0) {
      char secs[32];
      std::snprintf(secs, sizeof secs, "%.2f", v.seconds);
      std::ostringstream o;
      o << "hpctrain: verify: " << v.files << " dataset file(s): " << v.vetted << " vetted in child processes, "
        << v.files - v.vetted << " unchanged since vetted (" << cfg_.run.dir << "/verified.tsv); " << secs << " s";
      log_info(o.str());
    }
  }
  int threads = 1;
  collective_usage_check([&] { setup_local(threads); });
  probe_run_dir_shared_collective(cfg_.run.dir);  // warns when other nodes cannot see rank 0's files
  setup_distributed(threads);
  if (checkpoints) {
    checkpoints_ = std::make_unique<CheckpointManager>(*this, std::move(*checkpoints));
    checkpoints_->start();  // fresh, resume or --init-from, agreed by every rank
  }
}

Trainer::~Trainer() = default;

void Trainer::setup_local(int& threads) {
  setup_test_faults();
  threads = setup_device();
  setup_batch();
  setup_data();
  setup_model();
  // ---- Run directory (rank 0 writes it) ----
  if (rank_ == 0) {
    std::error_code ec;
    fs::create_directories(cfg_.run.dir, ec);
    if (ec) throw UsageError("run.dir = " + cfg_.run.dir + ": cannot create directory: " + ec.message());
  }
  // From here a time-out, a fatal error or a stop signal leaves this rank's flight record in
  // run.dir/flight/ (mpi/flight_recorder.hpp).
  flight_recorder_set_dir(cfg_.run.dir, dist().rank, dist().world_size, dist().host);
}

void Trainer::setup_test_faults() {
  const TestFaults& tf = TestFaults::get();  // UsageError for an unknown name or a bad value
  if (!tf.active()) return;
  log_warn_job("HT_TEST_FAULTS is set: injecting faults: " + tf.spec());
  faults_ = StepFaults::for_rank(rank_);
}

int Trainer::setup_device() {
  const auto& d = dist();
  device_ = select_device(cfg_.train.device, d.local_rank, cfg_.dist.allow_shared_gpu);
  if (device_ == Device::cuda) {
    cuda::Options co;
    co.workspace_bytes = static_cast<size_t>(cfg_.cuda.workspace_mb) << 20;
    co.deterministic = cfg_.train.deterministic;
    co.allow_tf32 = cfg_.train.precision == Precision::tf32;
    cuda::set_options(co);
  }
  const int threads =
      cfg_.train.threads > 0 ? cfg_.train.threads : std::max(1, omp_get_num_procs() / std::max(1, d.local_size));
  if (!std::getenv("OMP_NUM_THREADS") || cfg_.train.threads > 0) omp_set_num_threads(threads);
  return threads;
}

void Trainer::setup_batch() {
  // Global batch = world_size x micro-batch x accumulation steps.
  const int denom = world_ * cfg_.train.accumulation_steps;
  if (cfg_.train.global_batch % denom != 0)
    throw UsageError("train.global_batch = " + std::to_string(cfg_.train.global_batch) +
                     ": must be divisible by world_size (" + std::to_string(world_) + ") x train.accumulation_steps (" +
                     std::to_string(cfg_.train.accumulation_steps) + ")");
  micro_batch_ = cfg_.train.global_batch / denom;
}

void Trainer::setup_data() {
  if (cfg_.data.synthetic) {
    const auto& s = cfg_.data;
    train_ds_ = make_synthetic_dataset(s.synthetic_samples, s.synthetic_height, s.synthetic_width, s.synthetic_channels,
                                       s.synthetic_classes, cfg_.run.seed, "train");
    test_ds_ = make_synthetic_dataset(std::max<int64_t>(s.synthetic_samples / 4, 1), s.synthetic_height,
                                      s.synthetic_width, s.synthetic_channels, s.synthetic_classes, cfg_.run.seed, "test");
  } else {
    train_ds_ = open_sharded_dataset(data_dir_, "train");
    if (cfg_.train.eval) {  // without evaluation a dataset needs no test split
      test_ds_ = open_sharded_dataset(data_dir_, "test");
      check_splits_agree(train_ds_->info(), test_ds_->info());
    }
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
  lo.crop_size = cfg_.data.crop_size;
  lo.resized_crop = cfg_.data.random_resized_crop;
  lo.resized_crop_min_scale = cfg_.data.random_resized_crop_min_scale;
  lo.threads = cfg_.data.loader_threads;
  lo.layout = Layout::NCHW;
  lo.prefetch = cfg_.data.prefetch;
  lo.limit = cfg_.data.limit_train;
  train_loader_ = std::make_unique<DataLoader>(train_ds_, lo);
  steps_per_epoch_ = train_loader_->steps_per_epoch();
  n_train_ = cfg_.data.limit_train > 0 ? std::min(cfg_.data.limit_train, info.num_samples) : info.num_samples;
  if (steps_per_epoch_ <= 0)
    throw UsageError("train.global_batch = " + std::to_string(cfg_.train.global_batch) + ": larger than the " +
                     std::to_string(n_train_) + " train samples of " +
                     (cfg_.data.synthetic ? std::string("the synthetic dataset")
                                          : "data.dir = " + cfg_.data.dir + " (split train)") +
                     ", so an epoch has no step");
  if (cfg_.train.eval && test_ds_->info().num_samples == 0)  // every rank sees the same split: all throw
    throw UsageError("train.eval = true, but the test split of " +
                     (cfg_.data.synthetic ? std::string("the synthetic dataset") : "data.dir = " + cfg_.data.dir) +
                     " has 0 samples, so an evaluation would report the accuracy of nothing: add test samples "
                     "or set train.eval = false");
  LoaderOptions eo = lo;
  eo.train = false;
  eo.crop_padding = 0;
  eo.flip = false;
  eo.resized_crop = false;  // evaluation: the centre crop_size window
  eo.eval_batch = cfg_.train.eval_batch;
  eo.limit = cfg_.data.limit_test;
  if (test_ds_) test_loader_ = std::make_unique<DataLoader>(test_ds_, eo);
  total_steps_ = cfg_.train.epochs > 0 ? steps_per_epoch_ * cfg_.train.epochs : cfg_.train.max_steps;
  if (cfg_.train.max_steps > 0) total_steps_ = std::min(total_steps_, cfg_.train.max_steps);
}

void Trainer::setup_model() {
  const DatasetInfo& info = train_ds_->info();
  ModelSpec spec;
  spec.name = cfg_.model.name;
  spec.num_classes = cfg_.model.num_classes > 0 ? cfg_.model.num_classes : info.num_classes;
  spec.channels = info.channels;
  spec.height = train_loader_->out_height();  // after data.crop_size
  spec.width = train_loader_->out_width();
  spec.mlp_hidden = cfg_.model.mlp_hidden;
  spec.compute = compute_dtype(cfg_.train.precision, device_);  // UsageError where the device cannot
  model_ = std::make_unique<Model>(spec, device_, cfg_.run.seed);
  opt_ = std::make_unique<Sgd>(model_->params(), cfg_.optim);
  if (cfg_.train.loss_scale.enabled || cfg_.train.precision == Precision::fp16) scaler_.emplace(cfg_.train.loss_scale);
}

void Trainer::setup_distributed(int threads) {
  setup_communication();
  setup_monitoring();
  budget_ = std::make_unique<RunBudget>(
      cfg_.run, world_,
      rank_ == 0 ? previous_spend((fs::path(cfg_.run.dir) / "metrics.jsonl").string(), cfg_.run.price_per_gpu_hour)
                 : Spend{},
      device_ == Device::cuda);
  watchdog_ = std::make_unique<Watchdog>(cfg_.watchdog, cfg_.data.prefetch, rank_, world_, dist().hosts);
  open_run_files(threads);
  dist_barrier("end of setup (MPI_Barrier)");
}

void Trainer::setup_communication() {
  // CPU: MpiCommunicator (mpi/mpi_communicator.cpp); CUDA: NCCL (mpi/gpu/nccl_communicator.cu), or MPI
  // through host memory when dist.allow_shared_gpu.
  comm_ = make_communicator(device_, cfg_.dist.allow_shared_gpu, cfg_.dist.timeout_s);
  check_same_model_on_all_ranks();  // before any collective whose size depends on the model
  auto& ps = model_->params();
  auto span_of = [](Tensor& t) { return std::span<float>(t.data<float>(), static_cast<size_t>(t.numel())); };
  comm_->broadcast(span_of(ps.flat_values()), 0);
  comm_->broadcast(span_of(ps.flat_buffers()), 0);
  if (world_ > 1) {  // one rank: no buckets, nothing to exchange
    std::vector<ParamSlice> slices;
    for (const auto& p : ps.params()) slices.push_back({p.offset, shape_numel(p.shape)});
    bucketer_ = std::make_unique<GradBucketer>(*comm_, span_of(ps.flat_grads()), slices, cfg_.dist.bucket_mb,
                                               cfg_.dist.grad_dtype == GradDType::bf16 ? WireDType::bf16 : WireDType::f32);
  }
  buffers_backup_ = Tensor::empty(ps.flat_buffers().shape(), DType::f32, device_);
}

namespace {
/// One line per parameter and buffer ("param NAME [shape]"), after a line with the counts.
std::vector<std::string> model_layout(ParamStore& ps) {
  std::vector<std::string> lines{"parameters " + std::to_string(ps.num_params()) + " in " +
                                 std::to_string(ps.params().size()) + " tensors, buffer values " +
                                 std::to_string(ps.flat_buffers().numel()) + " in " +
                                 std::to_string(ps.buffers().size()) + " tensors"};
  for (const auto& p : ps.params()) lines.push_back("parameter " + p.name + " " + shape_to_string(p.shape));
  for (const auto& b : ps.buffers()) lines.push_back("buffer " + b.name + " " + shape_to_string(b.shape));
  return lines;
}
}  // namespace

void Trainer::check_same_model_on_all_ranks() {
  if (world_ == 1) return;
  const std::vector<std::string> mine = model_layout(model_->params());
  Fnv1a h;
  for (const auto& l : mine) h.update(l + "\n");
  const long long fp = static_cast<long long>(h.value() >> 2);
  if (dist_max(fp) == -dist_max(-fp)) return;
  // Some rank differs: rank 0's layout goes to every rank, each rank names its first difference.
  std::string text;
  for (const auto& l : mine) text += l + "\n";
  std::vector<char> bytes(text.begin(), text.end());
  comm_->broadcast_bytes(bytes, 0);
  std::vector<std::string> ref;
  std::string line;
  for (char c : bytes) {
    if (c == '\n') ref.push_back(std::move(line)), line.clear();
    else line += c;
  }
  collective_usage_check([&] {
    for (size_t i = 0; i < std::max(mine.size(), ref.size()); ++i) {
      const std::string a = i < mine.size() ? mine[i] : "(nothing)", b = i < ref.size() ? ref[i] : "(nothing)";
      if (a != b)
        throw UsageError("the ranks build different models (model." + std::string("name = ") + cfg_.model.name +
                         " here): rank " + std::to_string(rank_) + " has " + a + ", rank 0 has " + b +
                         "; every rank must get the same config and dataset");
    }
  });
}

void Trainer::setup_monitoring() {
  // NVML monitoring of the bound GPU (absent NVML: no fields).
  if (device_ == Device::cuda) {
    GpuEnv env = probe_gpu_env();
    const int ord = cuda::device();
    if (ord >= 0 && ord < static_cast<int>(env.devices.size()))
      nvml_ = std::make_unique<NvmlMonitor>(env.devices[static_cast<size_t>(ord)].uuid);
  }
  // Timeline (trace.enabled): clocks aligned with rank 0; each bucket's allreduce is recorded on the
  // communication thread (bucket = operation number modulo the buckets per step).
  if (cfg_.trace.enabled) {
    trace_.enable(dist().world);
    trace_.set_thread_name("main");
    if (bucketer_) {
      const int nb = bucketer_->num_buckets();
      comm_->set_async_observer([this, nb](int64_t seq, SteadyClock::time_point b, SteadyClock::time_point e) {
        trace_.record("allreduce", "comm", trace_.to_trace_us(b), trace_.to_trace_us(e), seq % nb);
      });
    }
  }
}

void Trainer::open_run_files(int threads) {
  if (rank_ != 0) return;
  std::ofstream(fs::path(cfg_.run.dir) / "config.ini") << to_ini(cfg_);
  metrics_ = std::make_unique<MetricsWriter>((fs::path(cfg_.run.dir) / "metrics.jsonl").string());
  std::ostringstream o;
  o << "hpctrain: " << world_ << " rank(s), device " << device_name(device_) << ", model " << model_->spec().name
    << " (" << model_->params().num_params() << " parameters), global batch " << cfg_.train.global_batch << " = "
    << world_ << " x " << micro_batch_ << " x " << cfg_.train.accumulation_steps
    << " (world_size x micro-batch x accumulation), " << steps_per_epoch_ << " steps/epoch";
  if (n_train_ % cfg_.train.global_batch)
    o << " (last " << n_train_ % cfg_.train.global_batch
      << " samples of each epoch's permutation dropped: every rank runs the same steps)";
  o << ", " << threads << " thread(s)/rank";
  log_info(o.str());
  // Old-format shards still train; say once per run that they lack HDF5's metadata checksums.
  std::vector<std::string> old = train_ds_->info().version1_shards;
  if (test_ds_)
    for (auto& p : test_ds_->info().version1_shards) old.push_back(p);
  if (!old.empty())
    log_warn_job(std::to_string(old.size()) + " shard(s) of data.dir = " + cfg_.data.dir +
                " are in shard format version 1 (HDF5's original file format, no metadata checksums), e.g. " +
                old.front() + ": re-run 'hpctrain prepare' to rewrite them in version 2 (docs/dataset.md)");
}

}  // namespace ht
