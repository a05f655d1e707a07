#pragma once
// Checkpoint files (docs/checkpoint.md): one HDF5 file per checkpoint,
// RUN_DIR/checkpoints/step-00001200.h5, plus RUN_DIR/LATEST naming the newest one.
//
// File layout (readable with h5py / h5dump without our code):
//   root attributes  format = "hpctrain-checkpoint", version = 1
//   /<tensor name>   float32 dataset with the tensor's shape, e.g. /param/conv1.weight,
//                    /buffer/bn1.running_mean, /momentum/conv1.weight (names contain '/': groups);
//                    a 0-d tensor is stored as shape [1] with attribute scalar = 1
//   /meta/tensor_names  uint8 text, one tensor name per line (the order of CheckpointData::tensors)
//   /ints/<key>      int64 [1]      /floats/<key> float64 [1]     /strings/<key> uint8 text
// Every dataset is chunked with the fletcher32 filter, so HDF5 fails a read of a corrupted chunk;
// file metadata uses the 1.8+ format, whose object headers and superblock carry checksums too.
//
// Writes are atomic: a temporary name in the same directory, fsync, rename, fsync of the
// directory, then LATEST replaced the same way. A crash at any moment leaves either the previous
// set of checkpoints or the new one, plus at most a leftover temporary file that readers ignore.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "src/base/tensor.hpp"

namespace ht {

/// Everything a checkpoint holds. Tensors are host float32 ("param/<name>", "buffer/<name>",
/// "momentum/<param name>"); ints hold step, epoch, step_in_epoch, world_size, seed, global_batch,
/// ...; floats hold loss_scale, lr; strings hold model, config_hash, config (INI text).
struct CheckpointData {
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::map<std::string, int64_t> ints;
  std::map<std::string, double> floats;
  std::map<std::string, std::string> strings;

  /// The tensor called `name`, or nullptr.
  const Tensor* find(const std::string& name) const;
  /// Total float32 payload in bytes.
  size_t payload_bytes() const;
  /// Integer `key`, throwing UsageError naming `origin` when absent.
  int64_t get_int(const std::string& key, const std::string& origin = "checkpoint") const;
};

/// "RUN_DIR/checkpoints".
std::string checkpoint_dir(const std::string& run_dir);
/// "RUN_DIR/checkpoints/step-%08lld.h5".
std::string checkpoint_path(const std::string& run_dir, int64_t step);
/// The step encoded in a checkpoint file name ("step-00001200.h5" -> 1200), or -1 when the name
/// is not a (final, non-temporary) checkpoint name.
int64_t checkpoint_step_from_name(const std::string& filename);

/// Expected file size of `d` in bytes: payload plus a generous bound on HDF5 metadata and
/// checksums. Used for the free-space check before every write.
size_t checkpoint_expected_bytes(const CheckpointData& d);

/// Throws RuntimeError naming `dir`, the bytes needed and the bytes free when the file system
/// holding `dir` (statvfs f_bavail) has fewer than `bytes_needed` bytes available to us.
void check_free_space(const std::string& dir, size_t bytes_needed);

/// Writes `d` to exactly `path` (fsynced, no rename): HDF5 builds the file in memory (core driver)
/// while each checksummed ~1 MiB chunk is written to the file as soon as HDF5 has placed it, with
/// write-back started as it goes (sync_file_range); the metadata follows after close, then fsync.
/// HDF5 does no disk I/O itself. Throws RuntimeError naming the path, the bytes needed and the
/// HDF5/system cause; a partial file is left for the caller to remove.
/// `delay_ms` > 0 sleeps half-way through (test hook: widens the window for crash tests).
void write_checkpoint_file(const std::string& path, const CheckpointData& d, double delay_ms = 0);

/// Reads `path` completely (every dataset, so every fletcher32 checksum is verified) and checks the
/// structure (format, version, tensor index, required ints). Throws UsageError naming the file and
/// the problem.
CheckpointData read_checkpoint_file(const std::string& path);

/// True when `path` is an HDF5 file whose root attribute format is "hpctrain-checkpoint" (cheap: no
/// data is read; never throws).
bool is_checkpoint_file(const std::string& path);

struct CheckpointWriteOptions {
  int keep_last = 3;            ///< keep the newest K checkpoints
  int64_t keep_every = 0;       ///< > 0: also keep, for good, every checkpoint whose step is a multiple
  double test_delay_ms = 0;     ///< test hook (checkpoint.test_write_delay_ms)
  bool check_space = true;      ///< statvfs check against checkpoint_expected_bytes before writing
};

struct CheckpointWriteResult {
  std::string path;             ///< final file
  size_t bytes = 0;             ///< file size
  double write_ms = 0;          ///< wall time of the whole write (file, fsyncs, renames, LATEST)
  double data_ms = 0;           ///< of which: file built and written (checksums, data in the page cache)
  double fsync_ms = 0;          ///< of which: fsync of the file (write-back still in flight)
  double publish_ms = 0;        ///< of which: rename, directory fsync, LATEST (write, fsync, rename, dir fsync)
  double prune_ms = 0;          ///< of which: deleting older checkpoints (ext4 here: ~25 ms per 90 MB file)
  std::vector<std::string> removed;  ///< older checkpoints pruned after the write
};

/// Writes step `step` of the run in RUN_DIR atomically (see the file comment), replaces LATEST,
/// then prunes old checkpoints. On any failure (disk full, unwritable directory) throws
/// RuntimeError naming the path and the bytes needed; the temporary file is removed and the
/// previous checkpoints and LATEST are untouched.
CheckpointWriteResult write_checkpoint(const std::string& run_dir, int64_t step, const CheckpointData& d,
                                       const CheckpointWriteOptions& opt = {});

/// Final checkpoint files in RUN_DIR/checkpoints as (step, path), ascending by step.
std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& run_dir);

/// Removes leftover temporary files (a writer killed mid-write) from RUN_DIR/checkpoints and
/// RUN_DIR; returns their paths. Call only when no writer of this run is active (rank 0 at start).
std::vector<std::string> clean_temporary_files(const std::string& run_dir);

struct LoadedCheckpoint {
  std::string path;
  CheckpointData data;
  std::vector<std::string> rejected;  ///< "PATH: reason" for every newer checkpoint that failed
};

/// The newest checkpoint of RUN_DIR that reads back completely (checksums and structure). Each
/// newer one that fails is reported through `warn` by name and, when `quarantine`, renamed to
/// PATH.bad so that it is not pruned into the last K nor tried again. nullopt when none is valid.
std::optional<LoadedCheckpoint> load_latest_checkpoint(const std::string& run_dir, bool quarantine,
                                                       const std::function<void(const std::string&)>& warn);

/// HDF5's Fletcher-32 checksum of `nbytes` at `src` (as its fletcher32 filter stores it), computed in
/// one vectorisable pass that also copies the bytes to `dst` when non-null. fletcher32_reference is
/// HDF5's own loop (H5checksum.c), kept for the equality test.
uint32_t fletcher32_copy(unsigned char* dst, const unsigned char* src, size_t nbytes);
uint32_t fletcher32_reference(const unsigned char* data, size_t nbytes);

/// hpctrain inspect on a checkpoint: prints step, epoch, world_size at save, parameter count,
/// tensors and the checksum status (every dataset read back). Returns 0 when valid, 2 when not.
int inspect_checkpoint(const std::string& path);

}  // namespace ht
