#pragma once
// The trainer: data -> forward -> backward (gradient buckets averaged across ranks while backward
// runs) -> optimizer -> metrics, with evaluation after each epoch. One object per rank; every rank
// runs the same steps in the same order (collectives inside must match).
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "io/dataset.hpp"
#include "io/trace.hpp"
#include "cuda/nvml_monitor.hpp"
#include "io/metrics.hpp"
#include "mpi/bucketer.hpp"
#include "mpi/communicator.hpp"
#include "src/train/config.hpp"
#include "src/nn/models.hpp"
#include "src/train/sgd.hpp"
#include "src/train/training_state.hpp"
#include "cuda/h2d_feeder.hpp"

namespace ht {

/// Where training stands: what a checkpoint must carry besides tensors to resume exactly.
struct TrainProgress {
  int64_t step = 0;           ///< optimizer steps done (global step counter)
  int epoch = 0;              ///< current epoch (0-based)
  int64_t step_in_epoch = 0;  ///< steps done inside the current epoch (the sample cursor)
  int64_t nonfinite_in_row = 0;
  int64_t nonfinite_total = 0;
};

/// Outcome of Trainer::run().
struct TrainSummary {
  int exit_code = 0;
  int64_t steps = 0;
  double last_loss = 0;
  double test_top1 = -1;   ///< last evaluation's top-1 (-1 when none ran)
  double test_loss = 0;
  double wall_s = 0;
  std::string status = "finished";  ///< run_end status: finished, stopped (signal), checkpoint_failed
};

/// Checkpoint hooks (src/train/checkpoint_manager.cpp). step_end runs on every rank after every step
/// (true: stop after this step); run_end once after the loop (final/stop checkpoint, exit code).
struct CheckpointHooks {
  std::function<bool()> step_end;
  std::function<void(TrainSummary&)> run_end;
};

class Trainer {
 public:
  /// Sets up device, data, model, optimizer and communication from `cfg`. Throws UsageError for
  /// bad config or data (every rank sees the same error), RuntimeError otherwise.
  explicit Trainer(const Config& cfg);
  ~Trainer();
  TrainSummary run();

  // ---- State access for checkpoints (io/checkpoint) ----
  /// Host copies of every tensor of the training state, by name: "param/<name>", "buffer/<name>",
  /// "momentum/<name>" (torchvision names).
  std::vector<std::pair<std::string, Tensor>> state_tensors();
  /// Loads tensors by the same names (missing names throw UsageError naming the name unless
  /// `params_only`, which loads "param/" and "buffer/" entries and ignores the rest).
  /// `skip` lists parameter names to leave as initialised (--reset-head).
  void load_state_tensors(const std::vector<std::pair<std::string, Tensor>>& tensors, bool params_only,
                          const std::vector<std::string>& skip = {});
  /// The training state for a checkpoint (src/train/trainer_state.cpp). Collective: every rank calls
  /// it at the same step. Rank 0 gets every tensor (host copies; "buffer/" entries are the average of
  /// the ranks' BatchNorm running statistics, summed at rank 0 through the communicator and divided by
  /// world_size); other ranks get the same fields without tensors.
  TrainingState capture_state();
  /// Loads `state` (local, no collectives): RestoreScope::full sets every tensor and the progress
  /// (resume); params / params_reset_head load "param/" and "buffer/" only (--init-from), leaving the
  /// last linear layer as initialised for params_reset_head. Returns the parameter names left as
  /// initialised. Throws UsageError naming a missing tensor or a shape the model does not have.
  std::vector<std::string> restore_state(const TrainingState& state, RestoreScope scope);
  /// The communicator over all ranks (MPI on CPU, NCCL on GPUs); also moves host bytes
  /// (Communicator::broadcast_bytes).
  Communicator& communicator() { return *comm_; }
  TrainProgress& progress() { return prog_; }
  Model& model() { return *model_; }
  const Config& config() const { return cfg_; }
  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  int64_t total_steps() const { return total_steps_; }
  /// Micro-batch per rank = global_batch / (world_size * accumulation_steps).
  int micro_batch() const { return micro_batch_; }
  /// The gradient bucketer (nullptr on one rank): its stats() hold the last step's bucket timeline.
  const GradBucketer* bucketer() const { return bucketer_.get(); }
  /// The timeline (--trace.enabled; io/trace.hpp): `TraceSpan s(trainer.trace(), "checkpoint");`.
  Trace& trace() { return trace_; }
  void set_checkpoint_hooks(CheckpointHooks h) { hooks_ = std::move(h); }
  /// metrics.jsonl writer (rank 0; nullptr elsewhere).
  MetricsWriter* metrics() { return metrics_.get(); }

 private:
  /// Device, data, model, optimizer and run directory: local work, no collectives.
  void setup_local(int& threads);
  /// Communicator, parameter broadcast, gradient buckets, metrics file (collective).
  void setup_distributed(int threads);
  /// One optimizer step over this rank's share of the global batch. Returns false when skipped
  /// because a loss or gradient was not finite on some rank.
  bool train_step(const Tensor& images, const Tensor& labels, nlohmann::json& rec);
  /// This rank's next train batch on the compute device (GPU: staged one batch ahead through
  /// pinned memory and the copy stream). False at the end of the epoch.
  bool next_batch(Tensor& images, Tensor& labels);
  void evaluate(int epoch);
  /// Verifies that every rank holds bit-identical parameters; throws RuntimeError otherwise.
  bool check_replicas();
  void log_progress(const nlohmann::json& rec, double elapsed_s);

  Config cfg_;
  std::unique_ptr<NvmlMonitor> nvml_;  ///< GPU runs: utilisation, memory, temperature, power into `step`
  Trace trace_;  ///< trace.enabled; written to run.dir/trace.json by run(). Declared before comm_, so it
                 ///< outlives the communication thread that records bucket spans into it.
  Device device_ = Device::cpu;
  int world_ = 1, rank_ = 0;
  int micro_batch_ = 0;
  int64_t steps_per_epoch_ = 0, total_steps_ = 0, n_train_ = 0;
  std::shared_ptr<Dataset> train_ds_, test_ds_;
  std::unique_ptr<DataLoader> train_loader_, test_loader_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Sgd> opt_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<GradBucketer> bucketer_;
  std::unique_ptr<MetricsWriter> metrics_;
  TrainProgress prog_;
  TrainSummary summary_;
  Tensor x_dev_, y_dev_, probs_, dlogits_, buffers_backup_;
  bool nan_injected_ = false;
  Batch host_batch_;                       // the loader's output (host)
  std::unique_ptr<cuda::H2DFeeder> feeder_;  // GPU runs: host-to-device pipeline
  bool staged_ = false;                    // feeder_ holds the next batch
  CheckpointHooks hooks_;
};

}  // namespace ht
