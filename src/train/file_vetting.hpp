#pragma once
// Vetting of untrusted HDF5 files (dataset shards at training start, a checkpoint before resume, files
// given to `hpctrain inspect`) in a separate, time-limited process before this process opens them:
// HDF5 1.10 can crash (heap overflows) or loop forever on corrupt metadata, and such a fault must end
// a disposable child, not corrupt or hang a rank. The child is `hpctrain verify --child FILE`
// (src/cli/cmd_verify.cpp, io/h5_verify.hpp), started with posix_spawn of /proc/self/exe.
// docs/verify.md describes the design, the time limit and the verdict cache.
#include <cstdint>
#include <string>
#include <vector>

namespace ht {

struct Config;

struct VetOptions {
  bool enabled = true;
  double timeout_s = 60;      ///< time limit per file: this ...
  double min_mb_per_s = 20;   ///< ... plus the file's size read at this rate
  std::string cache_path;     ///< verdict cache (RUN_DIR/verified.tsv); empty: none
  /// Reject only files that crash or hang the child; a file the child rejected cleanly (exit 1 or 2)
  /// passes, so that the caller's own reader reports it in its usual words (inspect's summary).
  bool reject_only_unsafe = false;
};

/// The options of the config's verify.* keys, with the cache in run.dir.
VetOptions vet_options(const Config& cfg);

/// The time limit in seconds for a file of `bytes` bytes: timeout_s + bytes / (min_mb_per_s * 1e6).
double vet_time_limit(const VetOptions& opt, uint64_t bytes);

/// The outcome of vetting one file.
struct VetVerdict {
  bool ok = false;
  bool runtime = false;   ///< not a verdict on the file: the child could not be started (exit 1)
  std::string message;    ///< ok: the child's summary line; else the error naming the file
  double seconds = 0;
};

/// Vets `path` in a child process (this process only, no collective). Never throws for a bad file.
VetVerdict vet_file(const std::string& path, const VetOptions& opt);

/// Vets `paths` in child processes, at most `width` at a time; the verdicts in the order of `paths`.
std::vector<VetVerdict> vet_files(const std::vector<std::string>& paths, const VetOptions& opt, int width);

/// Vets `path` in a child process; throws UsageError with the verdict's message when the file is
/// bad, RuntimeError when the child cannot be started. For one process's own files (rank 0's resume).
void vet_file_or_throw(const std::string& path, const VetOptions& opt);

/// Collective over MPI_COMM_WORLD, every rank with the same `files`: the files not in the verdict
/// cache are spread over the ranks by size (each vets a disjoint subset, up to a few children at a
/// time), and the verdicts are agreed in one allgather. When any file is bad, every rank throws
/// CollectiveUsageError naming the first bad file and what happened (exit 2 together). When the ranks
/// see different files at the same paths (node-local copies), every rank vets all of them itself.
/// Rank 0 records the good verdicts in the cache.
struct VetSummary {
  int files = 0;         ///< files given
  int vetted = 0;        ///< of which vetted by a child (on some rank); the others were in the cache
  double seconds = 0;    ///< wall time of the whole call on this rank
};
VetSummary vet_files_collective(const std::vector<std::string>& files, const VetOptions& opt);

/// The shard files of a dataset directory ("<train|test>-NNNNN-of-NNNNN.h5"), sorted; empty when the
/// directory does not exist (the reader reports that).
std::vector<std::string> dataset_shard_files(const std::string& dir);

}  // namespace ht
