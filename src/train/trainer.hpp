#pragma once
// The trainer: data -> forward -> backward (gradient buckets averaged across ranks while backward
// runs) -> non-finite check -> optimizer -> metrics, with evaluation after each epoch. One object
// per rank; every rank runs the same steps in the same order (collectives inside must match).
// Files: trainer_setup.cpp (construction), trainer.cpp (the run, the step, evaluation),
// trainer_state.cpp (the state a checkpoint holds); the trainer owns its CheckpointManager
// (src/train/checkpoint_manager.hpp), which it calls at each step boundary and at the end.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "io/dataset/dataset.hpp"
#include "mpi/trace.hpp"
#include "cuda/nvml_monitor.hpp"
#include "io/metrics.hpp"
#include "mpi/bucketer.hpp"
#include "mpi/communicator.hpp"
#include "src/train/budget.hpp"
#include "src/train/checkpoint_manager.hpp"
#include "src/train/config.hpp"
#include "src/nn/models.hpp"
#include "src/train/loss_scaler.hpp"
#include "src/train/sgd.hpp"
#include "src/train/step_metrics.hpp"
#include "src/train/training_state.hpp"
#include "src/train/watchdog.hpp"
#include "base/test_faults.hpp"
#include "cuda/h2d_feeder.hpp"

namespace ht {

/// How a run ended: metrics.jsonl's run_end "status" (to_string).
enum class RunStatus {
  finished,           ///< every step done
  stopped,            ///< a stop signal (checkpoint saved, exit 75)
  budget,             ///< run.max_* reached (checkpoint saved, exit 3)
  slow_rank,          ///< watchdog.slow_rank_stop_windows reached (checkpoint saved, exit 4)
  checkpoint_failed,  ///< a checkpoint write failed (exit 1)
};
/// "finished", "stopped", "budget", "checkpoint_failed".
const char* to_string(RunStatus s);

/// Outcome of Trainer::run().
struct TrainSummary {
  int exit_code = 0;
  int64_t steps = 0;
  double last_loss = 0;
  double test_top1 = -1;   ///< last evaluation's top-1 (-1 when none ran)
  double test_loss = 0;
  double wall_s = 0;
  RunStatus status = RunStatus::finished;
};

class Trainer {
 public:
  /// Sets up device, data, model, optimizer and communication from `cfg`. With `checkpoints` the
  /// trainer owns a CheckpointManager and starts it here (run.fresh, resume from the newest valid
  /// checkpoint, or --init-from); without (benchmarks) it saves nothing. Throws UsageError for bad
  /// config, data or checkpoint (every rank sees the same error), RuntimeError otherwise. Collective.
  explicit Trainer(const Config& cfg, std::optional<CheckpointArgs> checkpoints = std::nullopt);
  ~Trainer();
  /// Trains from progress() to total_steps() (evaluating after each epoch), writing metrics.jsonl
  /// on rank 0; the checkpoint manager saves at step boundaries, may stop it early (a stop signal,
  /// the budget, a failed write) and writes the final checkpoint. Collective. Throws RuntimeError when a
  /// rank fails or train.max_nonfinite_steps steps in a row are skipped.
  TrainSummary run();

  // ---- State access for checkpoints (io/checkpoint) ----
  /// Visits every tensor of the training state, in checkpoint order, with its dataset name
  /// ("param/<name>", "buffer/<name>", "momentum/<parameter name>": state_tensor_name, torchvision
  /// names) and a view of it on the compute device. The one list of the model's checkpoint tensors.
  void for_each_state_tensor(const std::function<void(const std::string& name, Tensor view)>& visit);
  /// Host copies of every tensor of the training state, by name (for_each_state_tensor).
  std::vector<std::pair<std::string, Tensor>> state_tensors();
  /// Name and shape of every tensor of the training state (for_each_state_tensor), for the checks
  /// of a checkpoint before its data is read.
  std::vector<std::pair<std::string, std::vector<int64_t>>> state_tensor_shapes();
  /// The head that --reset-head leaves as initialised: the last linear layer's parameters
  /// (head_param_names in src/train/training_state.hpp; "fc.weight", "fc.bias" for ResNets).
  std::vector<std::string> head_param_names() const;
  /// Loads tensors by the same names (missing names throw UsageError naming the name unless
  /// `params_only`, which loads "param/" and "buffer/" entries and ignores the rest).
  /// `skip` lists parameter names to leave as initialised (--reset-head).
  void load_state_tensors(const std::vector<std::pair<std::string, Tensor>>& tensors, bool params_only,
                          const std::vector<std::string>& skip = {});
  /// The training state for a checkpoint (src/train/trainer_state.cpp). Collective: every rank calls
  /// it at the same step. Rank 0 gets every tensor (host copies; "buffer/" entries are the average of
  /// the ranks' BatchNorm running statistics, and with world_size > 1 "rank_buffer/<r>/" entries hold
  /// each rank's own, gathered at rank 0 through the communicator); other ranks get the same fields
  /// without tensors.
  TrainingState capture_state();
  /// Loads `state` (local, no collectives): RestoreScope::full sets every tensor and the progress
  /// (resume; buffers from "rank_buffer/<this rank>/" when the state has them and was saved at this
  /// world_size, else the average in "buffer/"); params / params_reset_head load "param/" and "buffer/" only (--init-from), leaving the
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
  /// The timeline (--trace.enabled; mpi/trace.hpp): `TraceSpan s(trainer.trace(), "checkpoint");`.
  Trace& trace() { return trace_; }
  /// metrics.jsonl writer (rank 0; nullptr elsewhere).
  MetricsWriter* metrics() { return metrics_.get(); }
  /// The run's budget and spending (run.max_*; rank 0 holds the earlier starts' spending).
  RunBudget& budget() { return *budget_; }
  Watchdog& watchdog() { return *watchdog_; }


 private:
  /// This rank's loss and finiteness before the ranks agree.
  struct LocalPass {
    double loss = 0;            ///< mean over this rank's micro-batches
    bool nonfinite = false;     ///< some micro-batch's loss was not finite
  };

  // ---- set-up (trainer_setup.cpp), in order ----
  /// Device, data, model, optimizer and run directory: local work, no collectives.
  void setup_local(int& threads);
  /// Reads this rank's HT_TEST_FAULTS into faults_; rank 0 warns on stderr when faults are injected.
  void setup_test_faults();
  /// train.device, cuDNN options and compute threads (returned).
  int setup_device();
  /// micro_batch_ = global_batch / (world_size x accumulation_steps); UsageError if not whole.
  void setup_batch();
  /// Train and test datasets and loaders, steps per epoch and total steps.
  void setup_data();
  /// The model (initialised from run.seed) and its optimizer.
  void setup_model();
  /// Communicator, parameter broadcast, gradient buckets, metrics file (collective).
  void setup_distributed(int threads);
  /// Every rank starts from rank 0's parameters and buffers; gradient buckets when world_size > 1.
  void setup_communication();
  /// Compares every rank's parameter and buffer layout; UsageError (exit 2 on every rank) naming
  /// the first difference on each rank that differs from rank 0. Collective.
  void check_same_model_on_all_ranks();
  /// NVML sampling of the bound GPU and the timeline (trace.enabled).
  void setup_monitoring();
  /// Rank 0: run.dir/config.ini, metrics.jsonl and the one-line run description.
  void open_run_files(int threads);

  // ---- the run and the step (trainer.cpp) ----
  /// One optimizer step, top to bottom: data, forward, backward with bucketed exchange, non-finite
  /// check, optimizer, metrics. False (nothing done) when the epoch has no batch left.
  bool step(int epoch);
  /// This rank's next train batch on the compute device, passed through the test faults (none
  /// without HT_TEST_FAULTS). False at the end of the epoch.
  bool next_batch(Tensor& images, Tensor& labels);
  /// The loader's next batch on the compute device (GPU: staged one batch ahead through pinned
  /// memory and the copy stream). False at the end of the epoch.
  bool take_batch(Tensor& images, Tensor& labels);
  /// Forward and backward over the micro-batches; the last backward feeds the gradient buckets,
  /// which average across ranks while it runs. Fills forward_ms, backward_ms.
  LocalPass forward_backward(const Tensor& images, const Tensor& labels, StepMetrics& m);
  /// Waits for the buckets and agrees with every rank whether the step is finite (loss and
  /// gradients); fills allreduce_ms and the global loss. True: apply the update.
  bool exchange_and_check(const LocalPass& local, StepMetrics& m);
  /// Loss scaling after the ranks agreed: unscales the gradients of a
  /// finite step unless the exchange did, then updates the scale; fills m.loss_scale.
  void finish_loss_scale(bool finite, StepMetrics& m);
  /// The factor that seeds backward (d loss / d logits): 1 / A, times the loss scale when scaling.
  float loss_seed(int accumulation_steps) const;
  /// Applies the SGD update with m.lr; fills optimizer_ms.
  void optimizer_step(StepMetrics& m);
  /// Counts the step in progress_ (applied or skipped); throws RuntimeError after
  /// train.max_nonfinite_steps skipped steps in a row.
  void advance_progress(const StepMetrics& m);
  /// Replica check, NVML figures, the metrics.jsonl record and the progress line (rank 0).
  void record_step(StepMetrics& m, int64_t trace_begin_us);
  void log_progress(const StepMetrics& m, double elapsed_s);
  /// Evaluation at the end of an epoch (or of a run that max_steps ended inside one).
  void end_epoch(int epoch, bool stop, bool interrupted);
  void write_run_start();
  void write_run_end(double wall_s);

  // ---- evaluation and checks (trainer.cpp) ----
  /// Evaluates on the test split, logs and records the result (a phase "evaluate" in the trace).
  void evaluate(int epoch);
  /// The test split's summed loss, correct answers and samples over every rank (collective).
  void evaluate_pass(double& loss_sum, double& correct, double& count);
  /// A start that resumes from the final checkpoint (a run killed after its last save, before its
  /// run_end) evaluates the final model again, so the run's record ends with its test accuracy.
  void evaluate_final_again();
  /// Verifies that every rank holds bit-identical parameters; throws RuntimeError otherwise.
  bool check_replicas();

  // Members by concern. The order is also the reverse of destruction: the checkpoint manager goes
  // first (it waits for its write in flight while everything it reads still exists), the
  // communicator before the timeline its thread records into.
  // ---- the run's shape (set once by the set-up) ----
  Config cfg_;
  Device device_ = Device::cpu;
  int world_ = 1, rank_ = 0;
  int micro_batch_ = 0;
  int64_t steps_per_epoch_ = 0, total_steps_ = 0, n_train_ = 0;
  std::string data_dir_;  ///< where the shards are read: data.dir, or its copy in data.stage_dir
  // ---- observing: GPU monitor and timeline ----
  std::unique_ptr<NvmlMonitor> nvml_;  ///< GPU runs: utilisation, memory, temperature, power into `step`
  Trace trace_;                        ///< trace.enabled; written to run.dir/trace.json by run()
  // ---- data ----
  std::shared_ptr<Dataset> train_ds_, test_ds_;
  std::unique_ptr<DataLoader> train_loader_, test_loader_;
  // ---- model and optimizer ----
  std::unique_ptr<Model> model_;
  std::unique_ptr<Sgd> opt_;
  std::optional<LossScaler> scaler_;  ///< train.loss_scale.enabled or fp16 (src/train/loss_scaler.hpp)
  bool unscale_fused_ = false;        ///< this step's exchange divides by the loss scale too
  // ---- peers: gradient exchange ----
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<GradBucketer> bucketer_;
  // ---- progress and its record ----
  std::unique_ptr<MetricsWriter> metrics_;  ///< rank 0
  TrainProgress prog_;
  TrainSummary summary_;
  int64_t run_start_step_ = 0;  ///< prog_.step when run() began (for the ETA)
  double train_s_ = 0;          ///< seconds spent in steps during run()
  // ---- the step's working set ----
  StepFaults faults_;  ///< HT_TEST_FAULTS of this rank, applied by next_batch
  Tensor x_dev_, y_dev_, probs_, dlogits_, buffers_backup_;
  Batch host_batch_;                         ///< the loader's output (host)
  std::unique_ptr<cuda::H2DFeeder> feeder_;  ///< GPU runs: host-to-device pipeline
  bool staged_ = false;                      ///< feeder_ holds the next batch
  // ---- limits: run.max_* (src/train/budget.hpp) and watchdog.* (src/train/watchdog.hpp) ----
  std::unique_ptr<RunBudget> budget_;
  std::unique_ptr<Watchdog> watchdog_;
  // ---- checkpoints: start-up, periodic and final saves, agreed stops (none in benchmarks) ----
  std::unique_ptr<CheckpointManager> checkpoints_;
};

}  // namespace ht
