#pragma once
// The checkpoint file format (docs/checkpoint.md): one HDF5 file per checkpoint, written by a
// streaming writer (io/checkpoint/checkpoint_encode.cpp) and read back and validated completely
// (io/checkpoint/checkpoint_read.cpp). Where the files live, LATEST and pruning: io/checkpoint/checkpoint_store.hpp.
//
// File layout (readable with h5py / h5dump without our code):
//   root attributes  format = "hpctrain-checkpoint", version = 1 or 2 (checkpoint_version_for)
//   /<tensor name>   float32 dataset with the tensor's shape, e.g. /param/conv1.weight,
//                    /buffer/bn1.running_mean, /momentum/conv1.weight (names contain '/': groups);
//                    a 0-d tensor is stored as shape [1] with attribute scalar = 1
//   /rank_buffer/<r>/<buffer name>  version 2 only: rank r's own copy of each /buffer/<name>
//                    (r = 0 .. ints/world_size - 1, decimal; exactly the /buffer/ names and shapes)
//   /meta/tensor_names  uint8 text, one tensor name per line (the order of CheckpointData::tensors)
//   /ints/<key>      int64 [1]  (progress counters: checkpoint_counters_problem)      /floats/<key> float64 [1]     /strings/<key> uint8 text
// Every dataset is chunked (about 1 MiB per chunk along dimension 0) with the fletcher32 filter, so
// HDF5 fails a read of a corrupted chunk; file metadata uses the 1.10 format, whose object headers,
// chunk indexes and superblock carry checksums too.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/error.hpp"
#include "base/tensor.hpp"

namespace ht {

/// Root attribute `format` of every checkpoint file.
inline constexpr const char* kCheckpointFormat = "hpctrain-checkpoint";
/// Root attribute `version`: the newest version this build writes and reads. Version 2 adds the
/// per-rank buffers (/rank_buffer/<r>/<name>) to version 1; a file is written with the lowest version
/// that describes it (checkpoint_version_for), so a file without per-rank buffers stays version 1.
inline constexpr int kCheckpointVersion = 2;
/// The oldest version this build reads.
inline constexpr int kCheckpointMinVersion = 1;
/// The group of the per-rank buffers (version 2): "rank_buffer/<rank>/<buffer name>".
inline constexpr const char* kRankBufferGroup = "rank_buffer";

/// Everything a checkpoint holds. Tensors are host float32 ("param/<name>", "buffer/<name>",
/// "momentum/<param name>", and in version 2 "rank_buffer/<rank>/<buffer name>"); ints hold step,
/// epoch, step_in_epoch, world_size, seed, global_batch, ... (loss_scale_clean_steps with loss
/// scaling); floats hold loss_scale, lr; strings hold
/// model, config_hash, config (INI text).
struct CheckpointData {
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::map<std::string, int64_t> ints;
  std::map<std::string, double> floats;
  std::map<std::string, std::string> strings;
  /// The file's root attribute `version` (set by read_checkpoint_file; 0 for data not read from a
  /// file). The writer ignores it and writes checkpoint_version_for(data).
  int version = 0;

  /// The tensor called `name`, or nullptr.
  const Tensor* find(const std::string& name) const;
  /// Total float32 payload in bytes.
  size_t payload_bytes() const;
  /// Integer `key`, throwing UsageError naming `origin` when absent.
  int64_t get_int(const std::string& key, const std::string& origin = "checkpoint") const;
};

struct CheckpointLayout;

/// The groups of model tensors in a checkpoint. Every tensor dataset name is made and taken apart
/// by the functions below (and rank_buffer_name), nowhere else.
enum class StateGroup {
  param,     ///< "param/<name>": a parameter (torchvision names)
  buffer,    ///< "buffer/<name>": BatchNorm running statistics (averaged over ranks)
  momentum,  ///< "momentum/<parameter name>": SGD's momentum, one per parameter, of its shape
};

/// "param/<name>", "buffer/<name>" or "momentum/<name>".
std::string state_tensor_name(StateGroup group, const std::string& name);

/// The group of the dataset `tensor_name` and the model's name for it ("param/fc.weight" ->
/// param, "fc.weight"); false for "rank_buffer/..." and any other name.
bool parse_state_tensor_name(const std::string& tensor_name, StateGroup* group, std::string* name);

/// "rank_buffer/<rank>/<buffer_name>": the name of rank `rank`'s own copy of "buffer/<buffer_name>".
std::string rank_buffer_name(int64_t rank, const std::string& buffer_name);

/// True when `tensor_name` is in the per-rank buffer group ("rank_buffer/...").
bool is_rank_buffer_name(const std::string& tensor_name);

/// The version a file holding `d` is written with: 2 when `d` has per-rank buffers, else 1.
int checkpoint_version_for(const CheckpointData& d);

/// The per-rank buffers of `d` against the format of `version` (every reader runs it): version 1 has
/// none; version 2 has, for every rank 0 .. ints/world_size - 1 (world_size >= 2), exactly the names
/// and shapes of the "buffer/" tensors, and nothing else in the group. Returns "" when they agree,
/// otherwise the problem in words (naming the dataset).
std::string rank_buffer_problem(const CheckpointData& d, int64_t version);
/// rank_buffer_problem on a layout (before the data is read).
std::string rank_buffer_problem(const CheckpointLayout& l, int64_t version);

/// Expected file size of `d` in bytes: payload plus a generous bound on HDF5 metadata and
/// checksums. Used for the free-space check before every write.
size_t checkpoint_expected_bytes(const CheckpointData& d);

/// Writes `d` to exactly `path` (fsynced, no rename): HDF5 builds the file in memory (core driver)
/// while each checksummed ~1 MiB chunk is written to the file as soon as HDF5 has placed it, with
/// write-back started as it goes (sync_file_range); the metadata follows after close, then fsync.
/// HDF5 does no disk I/O itself. Throws RuntimeError naming the path, the bytes needed and the
/// HDF5/system cause; a partial file is left for the caller to remove.
/// Test hook: HT_TEST_FAULTS ckpt_write_delay_ms=MS sleeps MS half-way through (base/test_faults.hpp).
void write_checkpoint_file(const std::string& path, const CheckpointData& d);

/// What the file phase of one checkpoint write cost.
struct CheckpointFileTimes {
  size_t bytes = 0;     ///< file size
  double data_ms = 0;   ///< HDF5 file created, every chunk checksummed and written, then the metadata
  double fsync_ms = 0;  ///< the final fsync and close (waits for the write-back still in flight)
};

/// write_checkpoint_file without the message: throws H5Fail (io/h5.hpp) carrying only the cause,
/// for callers that name the file their own way (the run-directory store names the final path, not
/// its temporary one). Returns the size and timings.
CheckpointFileTimes stream_checkpoint_file(const std::string& path, const CheckpointData& d);

/// Bounds on what a checkpoint may declare (checked before anything is allocated).
inline constexpr int kCheckpointMaxRank = 8;                         ///< dimensions of a tensor
inline constexpr uint64_t kCheckpointMaxDatasetBytes = uint64_t(1) << 36;  ///< 64 GiB, one dataset
inline constexpr int64_t kCheckpointMaxWorldSize = int64_t(1) << 20;  ///< ints/world_size
inline constexpr int64_t kCheckpointMaxEpoch = 2147483646;            ///< ints/epoch (an int in memory)

/// An int a resume needs, and the range its value must lie in.
struct CheckpointResumeInt {
  const char* key;
  int64_t lo, hi;
};
/// The ints a resume needs (and a run directory's step-NNNNNNNN.h5 must have), the one list: the
/// training state's restore (src/train/training_state.cpp) and the file checks use it. epoch_offset
/// is optional (files of earlier builds lack it).
inline constexpr CheckpointResumeInt kCheckpointResumeInts[] = {
    {"step", 0, INT64_MAX},           {"epoch", 0, kCheckpointMaxEpoch},
    {"step_in_epoch", 0, INT64_MAX},  {"steps_per_epoch", 1, INT64_MAX},
    {"total_steps", 1, INT64_MAX},    {"nonfinite_in_row", 0, INT64_MAX},
    {"nonfinite_total", 0, INT64_MAX}, {"world_size", 1, kCheckpointMaxWorldSize},
    {"global_batch", 1, INT64_MAX}};

/// Whether ints/`key` is one of kCheckpointResumeInts.
constexpr bool is_checkpoint_resume_int(std::string_view key) {
  for (const CheckpointResumeInt& r : kCheckpointResumeInts)
    if (key == r.key) return true;
  return false;
}

/// One tensor dataset as the file declares it (shape in memory: a stored scalar [1] is {}).
struct CheckpointTensorInfo {
  std::string name;
  std::vector<int64_t> shape;
};

/// Everything a checkpoint file declares except its tensor data: what the validation looks at
/// before any tensor is allocated or read. Every dataset's declared size has already been compared
/// with the bytes HDF5 has stored for it and with the file size.
struct CheckpointLayout {
  int version = 0;
  std::vector<CheckpointTensorInfo> tensors;  ///< in the order of /meta/tensor_names
  std::map<std::string, int64_t> ints;
  std::map<std::string, double> floats;
  std::map<std::string, std::string> strings;

  /// The tensor called `name`, or nullptr.
  const CheckpointTensorInfo* find(const std::string& name) const;
};

/// The layout of `d` (for validating data that is already in memory).
CheckpointLayout checkpoint_layout_of(const CheckpointData& d);

/// The validation every reader runs (resume, --init-from, `hpctrain inspect`: one verdict), on what
/// the file alone says: the tensor index (unique names in param/, buffer/, momentum/, rank_buffer/),
/// the per-rank buffers (rank_buffer_problem), when `filename` is a checkpoint name (step-NNNNNNNN.h5)
/// ints/step equal to its step and every kCheckpointResumeInts present, and the progress counters
/// (checkpoint_counters_problem).
/// Returns "" when valid, otherwise the problem naming the dataset and the value.
std::string checkpoint_layout_problem(const CheckpointLayout& l, const std::string& filename);

/// The progress counters and run fields of `l` (those present; a resume requires them all, see
/// checkpoint_run_problem in src/train/training_state.hpp): step >= 0; 0 <= epoch <=
/// kCheckpointMaxEpoch; steps_per_epoch >= 1; 0 <= step_in_epoch <= steps_per_epoch; 1 <= total_steps,
/// step <= total_steps; 0 <= nonfinite_in_row <= nonfinite_total; 1 <= world_size <=
/// kCheckpointMaxWorldSize (0: not recorded) dividing global_batch >= 1; epoch and the cursor agree
/// with the step: step + nonfinite_total (steps done, applied or skipped) = epoch x steps_per_epoch +
/// step_in_epoch + epoch_offset (without epoch_offset, an older file: epoch + step_in_epoch <= steps
/// done); floats/lr finite and >= 0, floats/loss_scale finite and > 0, and with
/// ints/loss_scale_clean_steps (runs with loss scaling) that count >= 0 and loss_scale a power of two.
/// "" when valid.
std::string checkpoint_counters_problem(const CheckpointLayout& l);

/// A check of the layout by the caller (the model's tensor names and shapes, the run's config),
/// run after checkpoint_layout_problem and before any tensor data is read: "" to accept, otherwise
/// the problem (the file is then invalid). Called with the layout and the file's path. It may throw
/// CheckpointRefusal to stop a search through older checkpoints (the problem is the run's, not the
/// file's).
using CheckpointCheck = std::function<std::string(const CheckpointLayout&, const std::string& path)>;

/// A checkpoint that this run refuses whatever its content (another model.name or
/// train.global_batch): load_latest_checkpoint stops and rethrows it instead of trying older ones.
class CheckpointRefusal : public UsageError {
 public:
  using UsageError::UsageError;
};

/// Reads `path` completely (every dataset, so every fletcher32 checksum is verified) after checking
/// it: format, version 1 or 2, the tensor index; for every dataset its element type (IEEE float32
/// tensors, int64 / float64 scalars, uint8 text), rank (<= kCheckpointMaxRank), element and byte
/// counts (64-bit, overflow-checked, <= kCheckpointMaxDatasetBytes), chunked layout with exactly the
/// fletcher32 filter, and that its data is stored: every chunk allocated, the stored bytes covering
/// the declared size and within the file size (a dataset without data is invalid); then
/// checkpoint_layout_problem and `check`, all before any tensor is allocated. Throws UsageError
/// "checkpoint PATH is invalid: <problem>" naming the dataset and value (CheckpointRefusal from
/// `check` passes through unchanged).
CheckpointData read_checkpoint_file(const std::string& path, const CheckpointCheck& check = {});

/// True when `path` is an HDF5 file whose root attribute format is "hpctrain-checkpoint" (cheap: no
/// data is read; never throws).
bool is_checkpoint_file(const std::string& path);

/// "123 bytes", or "12345678 bytes (11.8 MiB)" from 1 MiB up: sizes in checkpoint messages.
std::string checkpoint_size_text(size_t bytes);

/// Bytes available to us on the file system holding `dir` (statvfs f_bavail * f_frsize); SIZE_MAX
/// when statvfs fails.
size_t available_bytes(const std::string& dir);

}  // namespace ht
