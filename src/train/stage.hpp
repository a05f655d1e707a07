#pragma once
// Node-local staging of the dataset (data.stage_dir, e.g. $SLURM_TMPDIR or a local NVMe path).
// Before the first step, one rank per node (local_rank 0 of the MPI_COMM_TYPE_SHARED split, see
// mpi/dist.hpp) copies the shards into STAGE_DIR/<name of data.dir>-<hash of its absolute path>/;
// then every rank reads from there. Every shard is copied, train and test: the sampling rule's
// global shuffle (docs/dataset.md) gives every rank samples of every train shard.
// A shard already staged is kept when its size and modification time (nanoseconds) equal the
// source's: a copy gets the source's mtime only after it is complete and its size checked, under a
// temporary name renamed into place, so a half-written copy never passes. The staged shards are
// then vetted like any dataset (src/train/file_vetting.hpp) before they are opened.
// Errors (not enough space, an unwritable directory, a failed read or write) are UsageErrors that
// every rank agrees on (exit 2 on every rank), naming the directory and the bytes needed.
#include <cstdint>
#include <string>
#include <vector>

namespace ht {

struct Config;

/// What one node's staging did (the leader's figures; zero on the other ranks).
struct StageReport {
  std::string dir;          ///< the staged copy of data.dir (every rank)
  int files = 0;            ///< shards of data.dir
  int copied = 0;           ///< of which copied now (the others were already staged and identical)
  uint64_t bytes_copied = 0;
  double seconds = 0;       ///< wall time of the copies
};

/// The directory under `stage_dir` that holds the copy of `data_dir`:
/// stage_dir/<basename>-<16 hex digits of FNV-1a of the absolute data_dir>.
std::string staged_data_dir(const std::string& stage_dir, const std::string& data_dir);

/// One process's staging of `files` (paths under data_dir) into `target` (created). `free_bytes`
/// < 0: ask the file system (statvfs). Throws UsageError naming the directory and the bytes needed
/// when they do not fit or cannot be written. No collectives.
StageReport stage_files(const std::vector<std::string>& files, const std::string& target, double free_bytes = -1);

/// Collective over MPI_COMM_WORLD. With data.stage_dir set (and real data), the node leaders stage
/// every shard of data.dir and print one line each (shards copied, bytes, bandwidth); returns the
/// directory every rank must read from. Without it returns data.dir. Errors: CollectiveUsageError
/// on every rank (exit 2).
std::string stage_dataset(const Config& cfg);

}  // namespace ht
