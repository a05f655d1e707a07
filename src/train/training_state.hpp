#pragma once
// The training state: everything a checkpoint carries to resume a run exactly, typed. The Trainer
// captures and restores it (Trainer::capture_state / restore_state, src/train/trainer_state.cpp);
// the checkpoint manager moves it between the trainer, the checkpoint files (io/checkpoint/checkpoint_format.hpp) and
// the other ranks (serialize_training_state + Communicator::broadcast_bytes).
//
// The file format is io's CheckpointData. One list of fields (for_each_field in
// training_state.cpp) maps the two and makes the bytes of the broadcast; the loss scaler's state
// travels beside it (LossScaleState), and which ints a resume requires, with their ranges, is the
// file format's kCheckpointResumeInts (io/checkpoint/checkpoint_format.hpp):
//   tensors        <-> CheckpointData::tensors (names: state_tensor_name and rank_buffer_name,
//                  io/checkpoint/checkpoint_format.hpp; per-rank buffers are checkpoint format version 2)
//   ints           step, epoch, step_in_epoch, nonfinite_in_row, nonfinite_total, epoch_offset,
//                  world_size, seed, global_batch, total_steps, steps_per_epoch, and
//                  loss_scale_clean_steps (runs with loss scaling only: LossScaleState)
//   floats         lr (of the next step), loss_scale (1 without loss scaling), and when known
//                  train_loss, test_top1, test_loss
//   strings        model, config (INI text), config_hash (FNV-1a of config, 16 hex digits)
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "io/checkpoint/checkpoint_store.hpp"
#include "base/tensor.hpp"
#include "src/train/loss_scaler.hpp"

namespace ht {

/// Where training stands: the counters that resume the sample stream and the schedule exactly.
struct TrainProgress {
  int64_t step = 0;           ///< optimizer steps done (global step counter)
  int epoch = 0;              ///< current epoch (0-based)
  int64_t step_in_epoch = 0;  ///< steps done inside the epoch (the sample cursor, in global steps)
  int64_t nonfinite_in_row = 0;  ///< skipped (non-finite) steps in a row, up to the last step
  int64_t nonfinite_total = 0;   ///< skipped steps in the whole run
  /// Steps (applied or skipped) of the completed epochs beyond epoch x steps_per_epoch: 0 unless a
  /// resume changed the length of an epoch (then set by Trainer::restore_state), so that
  /// step + nonfinite_total = epoch x steps_per_epoch + step_in_epoch + epoch_offset always holds.
  int64_t epoch_offset = 0;

  bool operator==(const TrainProgress&) const = default;
};

/// Everything a checkpoint carries to resume a run exactly.
struct TrainingState {
  /// Host float32 tensors by name: "param/<name>", "buffer/<name>" (BatchNorm running statistics,
  /// averaged over ranks when captured: for export, --init-from and resume at another world size),
  /// "momentum/<param name>" (torchvision names), and when world_size > 1 and the model has buffers
  /// "rank_buffer/<rank>/<name>" for every rank: each rank's own running statistics, which a resume
  /// at the same world size restores rank by rank (bitwise exact).
  std::vector<std::pair<std::string, Tensor>> tensors;

  TrainProgress progress;

  // ---- the run that saved it ----
  int64_t world_size = 0;  ///< ranks at save (0 when the checkpoint does not record it)
  uint64_t seed = 0;       ///< run.seed
  int64_t global_batch = 0;
  int64_t total_steps = 0;
  int64_t steps_per_epoch = 0;
  double lr = 0;           ///< learning rate of the next step
  /// The loss scaler (src/train/loss_scaler.hpp) of a run with loss scaling; empty otherwise (the
  /// file then holds floats/loss_scale = 1 and no ints/loss_scale_clean_steps, as earlier builds wrote).
  std::optional<LossScaleState> loss_scale;
  // ---- how the run was doing at the save (to pick the best checkpoint; absent in earlier files) ----
  std::optional<double> train_loss;  ///< the last finite step loss (global mean)
  std::optional<double> test_top1;   ///< the latest evaluation before the save: top-1 in [0, 1] ...
  std::optional<double> test_loss;   ///< ... and its mean loss
  std::string model = "?"; ///< model.name ("?" when the checkpoint does not record it)
  std::string config;      ///< the effective config as INI text ("" when not recorded)
  std::string config_hash; ///< FNV-1a of `config`, 16 lower-case hex digits

  /// The tensor called `name`, or nullptr.
  const Tensor* find(const std::string& name) const;
};

/// True when `state` holds per-rank buffers ("rank_buffer/<rank>/<name>").
bool has_rank_buffers(const TrainingState& state);

/// What Trainer::restore_state loads from a TrainingState.
enum class RestoreScope {
  full,               ///< resume: every tensor (param/, buffer/, momentum/) and the progress; at the saved
                      ///< world_size each rank's buffers from rank_buffer/<rank>/ when the state has them
  params,             ///< --init-from: param/ and buffer/ tensors only; training starts at step 0
  params_reset_head,  ///< --init-from --reset-head: as params, the last linear layer stays as initialised
};

/// The checkpoint file content for `state` (tensors are moved, not copied). The keys are exactly
/// those listed in the file comment, so files stay identical to what earlier versions wrote.
CheckpointData to_checkpoint_data(TrainingState state);

/// The state held in a checkpoint read from `origin` (a path, for messages); tensors are moved.
/// With `require_progress` (resuming), every key of training_state_resume_ints() must be present
/// (UsageError naming `origin` and the first missing key otherwise); without it (--init-from, which
/// loads tensors only) absent keys keep their defaults, as other absent keys always do.
TrainingState training_state_from_checkpoint(CheckpointData data, const std::string& origin,
                                             bool require_progress = true);

/// The ints a resume needs: the keys of the file format's kCheckpointResumeInts
/// (io/checkpoint/checkpoint_format.hpp), each a field of the training state.
std::vector<std::string> training_state_resume_ints();

/// What a resume or --init-from needs of a checkpoint, from this run (checkpoint_run_problem).
struct CheckpointExpectation {
  bool resume = true;                 ///< resume (every tensor, the progress) or --init-from (param/, buffer/)
  std::string run_dir;                ///< for messages
  std::string model;                  ///< model.name
  int64_t global_batch = 0;           ///< train.global_batch
  bool allow_config_change = false;   ///< run.allow_config_change
  /// The model's tensors by checkpoint name ("param/<name>", "buffer/<name>", "momentum/<name>")
  /// and shape (0-d: {}).
  std::vector<std::pair<std::string, std::vector<int64_t>>> tensors;
  std::vector<std::string> any_shape; ///< --reset-head: the head's "param/..." names, any shape allowed
};

/// The checkpoint at `path` (layout `l`) against this run, before any tensor data is read.
/// Resume: throws CheckpointRefusal naming both values when strings/model or ints/global_batch
/// differ from the run's (unless allow_config_change); requires every key of
/// training_state_resume_ints(); the param/, buffer/ and momentum/ tensors must be
/// exactly the model's, name for name and shape for shape. --init-from: every param/ and buffer/
/// tensor of the model present with its shape (any shape for `any_shape`). Returns "" or the problem
/// naming the dataset and the values.
std::string checkpoint_run_problem(const CheckpointLayout& l, const std::string& path, const CheckpointExpectation& e);

/// `state` as bytes (every field and tensor; native byte order: for ranks of one job), for
/// Communicator::broadcast_bytes. deserialize_training_state is its inverse; it throws RuntimeError
/// when `bytes` is truncated or malformed.
std::vector<char> serialize_training_state(const TrainingState& state);
TrainingState deserialize_training_state(std::span<const char> bytes);

/// Names of the last linear layer's parameters ("fc.weight", "fc.bias" for ResNets): the last
/// two-dimensional "*.weight" parameter and its bias (absent bias: the weight alone). Empty when the
/// model has no such parameter. `param_ndims[i]` is the rank of parameter `param_names[i]`.
std::vector<std::string> head_param_names(const std::vector<std::string>& param_names,
                                          const std::vector<int>& param_ndims);

}  // namespace ht
