#pragma once
// The checkpoints of a run directory (docs/checkpoint.md): one file per checkpoint,
// RUN_DIR/checkpoints/step-00001200.h5 (format: io/checkpoint/checkpoint_format.hpp), plus RUN_DIR/LATEST
// naming the newest one.
//
// Writes are atomic: a temporary name in the same directory, fsync, rename, fsync of the
// directory, then LATEST replaced the same way. A crash at any moment leaves either the previous
// set of checkpoints or the new one, plus at most a leftover temporary file that readers ignore.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "io/checkpoint/checkpoint_format.hpp"

namespace ht {

/// "RUN_DIR/checkpoints".
std::string checkpoint_dir(const std::string& run_dir);
/// "RUN_DIR/checkpoints/step-%08lld.h5".
std::string checkpoint_path(const std::string& run_dir, int64_t step);
/// The step encoded in a checkpoint file name ("step-00001200.h5" -> 1200), or -1 when the name
/// is not a (final, non-temporary) checkpoint name.
int64_t checkpoint_step_from_name(const std::string& filename);

/// Throws RuntimeError naming `dir`, the bytes needed and the bytes free when the file system
/// holding `dir` (statvfs f_bavail) has fewer than `bytes_needed` bytes available to us.
void check_free_space(const std::string& dir, size_t bytes_needed);

struct CheckpointWriteOptions {
  int keep_last = 3;            ///< keep the newest K checkpoints
  int64_t keep_every = 0;       ///< > 0: also keep, for good, every checkpoint whose step is a multiple
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

/// The newest checkpoint of RUN_DIR that reads back completely (read_checkpoint_file with `check`:
/// checksums, structure, counters, and the caller's model/run check). Each newer one that fails is
/// reported through `warn` by name and, when `quarantine` and an older one is valid, renamed to
/// PATH.bad so that it is not pruned into the last K nor tried again. nullopt when none is valid
/// (nothing renamed); `rejected`, when given, receives "checkpoint PATH is invalid: reason" for every
/// file that failed. A CheckpointRefusal from `check` stops the search and is rethrown. `vet`, when
/// given, runs on each candidate before this process opens it and throws (UsageError) to reject it
/// like a failed read (the trainer vets in a child process: src/train/file_vetting.hpp).
std::optional<LoadedCheckpoint> load_latest_checkpoint(const std::string& run_dir, bool quarantine,
                                                       const std::function<void(const std::string&)>& warn,
                                                       const CheckpointCheck& check = {},
                                                       std::vector<std::string>* rejected = nullptr,
                                                       const std::function<void(const std::string&)>& vet = {});

}  // namespace ht
