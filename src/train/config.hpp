#pragma once
// The run configuration: INI files (configs/*.ini) and --section.key flags through
// Boost.Program_options; flags override the file. Keys and meanings: docs/config.md. Test-only
// fault injection is not configured here: see base/test_faults.hpp (HT_TEST_FAULTS).
#include <cstdint>
#include <string>
#include <vector>

#include "src/train/loss_scaler.hpp"

namespace ht {

/// train.device: where the ops run. `automatic` ("auto") picks cuda when every rank sees a GPU.
enum class DeviceChoice { automatic, cpu, cuda };
/// train.precision (docs/precision.md). bf16/fp16: mixed precision with float32 master weights;
/// whether the device can run it is checked when the model is built (src/train/precision.hpp).
enum class Precision { fp32, tf32, bf16, fp16 };
/// dist.grad_dtype: the type gradients travel in between ranks (mpi/communicator.hpp WireDType).
enum class GradDType { fp32, bf16 };
/// optim.schedule: the learning-rate schedule after warm-up (src/train/sgd.hpp learning_rate).
enum class LrSchedule { constant, step, cosine };

/// The config-file spelling of each value ("auto", "tf32", "cosine", ...), as to_ini writes it.
const char* to_string(DeviceChoice d);
const char* to_string(Precision p);
const char* to_string(LrSchedule s);
const char* to_string(GradDType g);

struct Config {
  struct Run {
    std::string dir = "runs/default";  ///< run directory (config.ini, metrics.jsonl, checkpoints/)
    uint64_t seed = 42;                ///< the one seed for sampling, augmentation and initialisation
    bool fresh = false;                ///< start over on a run directory that has checkpoints
    bool allow_config_change = false;  ///< resume even if the model or global batch changed
    // Budget (src/train/budget.hpp): counted over the whole run (every start since the run directory's
    // first), 0 = no limit; a run about to cross a limit saves a checkpoint and stops (exit 3).
    double max_hours = 0;              ///< wall hours
    double max_gpu_hours = 0;          ///< device hours: wall hours x ranks (one device per rank, CPU ranks too)
    double max_cost = 0;               ///< currency units: GPU-hours x price_per_gpu_hour
    double price_per_gpu_hour = 0;     ///< price of one device hour (for the cost figures and max_cost)
  } run;
  struct Data {
    std::string dir;                   ///< dataset directory (docs/dataset.md schema)
    bool synthetic = false;            ///< generated data instead of data.dir
    int64_t synthetic_samples = 4096;  ///< train samples when synthetic (test: a quarter)
    int synthetic_height = 32, synthetic_width = 32, synthetic_channels = 3, synthetic_classes = 10;
    int crop_padding = 0;              ///< random crop with this zero padding (0 = off)
    bool flip = false;                 ///< random horizontal flip
    int crop_size = 0;                 ///< > 0: the model sees crop_size x crop_size images (centre crop, or random resized)
    bool random_resized_crop = false;  ///< train: torchvision's RandomResizedCrop to crop_size
    double random_resized_crop_min_scale = 0.08;  ///< its smallest area fraction
    int loader_threads = 1;            ///< threads that crop, resize, flip and normalise a batch
    bool prefetch = true;              ///< read the next batch on a background thread
    int64_t limit_train = 0;           ///< use only the first N train samples (0 = all)
    int64_t limit_test = 0;            ///< use only the first N test samples (0 = all)
    std::string stage_dir;             ///< node-local copy of data.dir's shards (src/train/stage.hpp); empty: off
  } data;
  struct Model {
    std::string name = "fmnist_cnn";   ///< fmnist_cnn, resnet18_cifar, resnet18, resnet50, mlp
    int num_classes = 0;               ///< 0 = from the dataset
    int mlp_hidden = 64;               ///< hidden width of the mlp model
  } model;
  struct Train {
    DeviceChoice device = DeviceChoice::automatic;  ///< cpu, cuda, or auto (cuda when a GPU is visible)
    int epochs = 1;
    int64_t max_steps = 0;             ///< 0 = unlimited
    int global_batch = 128;
    int accumulation_steps = 1;
    Precision precision = Precision::fp32;  ///< fp32, tf32 (GPU), bf16, fp16 (docs/precision.md)
    float label_smoothing = 0.f;
    int max_nonfinite_steps = 5;       ///< abort after this many skipped (non-finite) steps in a row
    int log_every_steps = 50;
    int eval_batch = 256;              ///< per-rank evaluation batch
    bool eval = true;                  ///< evaluate on the test split after each epoch
    bool deterministic = false;        ///< deterministic algorithms only (cuDNN)
    int threads = 0;                   ///< compute threads per rank (0 = cores / local ranks)
    LossScaleConfig loss_scale;        ///< train.loss_scale.*: dynamic loss scaling (on with fp16)
  } train;
  struct Optim {
    float lr = 0.01f;
    float momentum = 0.9f;
    float weight_decay = 5e-4f;
    bool nesterov = false;
    bool wd_on_bias_bn = true;         ///< false: no weight decay on biases and batch-norm parameters
    LrSchedule schedule = LrSchedule::cosine;  ///< constant, step, cosine
    int64_t warmup_steps = 0;          ///< linear warm-up from 0 over this many steps
    int step_epochs = 30;              ///< step schedule: multiply by step_gamma every N epochs
    float step_gamma = 0.1f;
    float min_lr = 0.f;                ///< cosine floor
  } optim;
  struct Checkpoint {
    int64_t every_steps = 0;           ///< 0 = off
    double every_minutes = 0;          ///< 0 = off
    int keep_last = 3;
    int64_t keep_every = 0;            ///< also keep every checkpoint whose step is a multiple of N
    double mtbf_minutes = 0;           ///< > 0: Young/Daly interval sqrt(2 C M) - C from the measured cost
    bool async = true;                 ///< write on a background thread
    std::string signals = "TERM,USR1"; ///< signals that checkpoint and stop with exit code 75
  } checkpoint;
  struct Dist {
    double bucket_mb = 25;             ///< gradient bucket size in MB (on the wire)
    GradDType grad_dtype = GradDType::fp32;  ///< fp32 or bf16 (half the bytes on the wire)
    bool allow_shared_gpu = false;     ///< two ranks on one GPU: gradients over MPI, not NCCL
    double timeout_s = 300;            ///< NCCL init and collective time limit
    int64_t check_replicas_every = 0;  ///< every N steps verify all ranks hold identical parameters (0 = off)
  } dist;
  struct Verify {
    bool enabled = true;               ///< vet shards and checkpoints in a child process before opening them
    double timeout_s = 60;             ///< time limit per file: this many seconds ...
    double min_mb_per_s = 20;          ///< ... plus the file's size read at this many MB/s
  } verify;
  struct Watchdog {                    ///< rank 0's utilisation warnings (src/train/watchdog.hpp)
    bool enabled = true;
    int64_t window_steps = 50;         ///< steps per judgement
    double max_data_share = 0.3;       ///< warn when waiting for data exceeds this share of the step
    double max_comm_share = 0.5;       ///< warn when exposed gradient communication exceeds this share
    double min_gpu_util_pct = 70;      ///< warn when NVML utilisation stays below this (GPU runs)
    double max_rank_spread = 1.5;      ///< warn when the slowest rank's busy time exceeds the median's by this factor
    double repeat_minutes = 10;        ///< the same kind of warning at most once per this many minutes
    int64_t slow_rank_stop_windows = 0; ///< > 0: stop after a checkpoint once one rank is slow this many windows in a row
  } watchdog;
  struct Trace {
    bool enabled = false;              ///< Chrome trace (trace.json) of every rank's spans
  } trace;
  struct Cuda {
    int workspace_mb = 256;            ///< cuDNN workspace cap per convolution
  } cuda;
};

/// Parses --config FILE plus --section.key flags (flags win). Unknown keys in the file or on the
/// command line throw UsageError naming the key, the file and the closest valid key. Values are
/// validated (ranges, enums) with the same kind of message ("ORIGIN: key = value: why"); the enum
/// keys are parsed here once.
/// `extra` receives arguments that are not config keys when non-null (e.g. --init-from); otherwise
/// they are errors too.
Config parse_config(const std::vector<std::string>& args, std::vector<std::string>* extra = nullptr);

/// Parses INI text (as written by to_ini) into a Config; `origin` names it in errors.
Config parse_config_text(const std::string& ini, const std::string& origin);

/// The effective config as INI text, every key with its value (numbers in the shortest text that
/// reads back exactly), sections in a fixed order.
std::string to_ini(const Config& c);

/// All valid keys ("section.key").
std::vector<std::string> config_keys();

/// One config key as --help and docs/config.md describe it: the type ("int", "float", "bool",
/// "string"), the default as to_ini writes it, one line of meaning, for numeric keys the accepted
/// interval ("[1, 1e+12]") and for enum keys their values ("cpu, cuda, auto"); empty otherwise.
struct ConfigKey {
  std::string name, type, default_text, help, range, choices;
};
/// Every key in to_ini's order: the list that drives parsing and validation.
std::vector<ConfigKey> config_key_table();

/// A key whose value differs between two configs, both values in to_ini's spelling.
struct ConfigChange {
  std::string key, from, to;
};
/// The keys whose values differ between a and b, in to_ini's order.
std::vector<ConfigChange> config_differences(const Config& a, const Config& b);

/// The closest valid key to `key` by edit distance (for "did you mean").
std::string closest_key(const std::string& key);

}  // namespace ht
