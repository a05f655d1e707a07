#pragma once
// The in-process half of `hpctrain verify` (docs/verify.md): parse and read one HDF5 file completely,
// the way hpctrain's readers and `hpctrain inspect` do, so that a file HDF5 cannot parse crashes or
// hangs this process and not a trainer. It runs in the vetting child (src/train/file_vetting.hpp);
// never call it on an untrusted file in a process that must survive.
#include <cstdint>
#include <optional>
#include <string>

namespace ht {

/// What an HDF5 file is, by its root attribute "format" and its name.
enum class H5FileKind { checkpoint, dataset_shard, other };
/// "checkpoint", "dataset shard" or "HDF5 file".
const char* to_string(H5FileKind k);

/// What verify_h5_file read.
struct H5VerifyReport {
  std::optional<H5FileKind> kind;  ///< empty until the file is opened
  int64_t objects = 0;       ///< groups and datasets visited
  int64_t attributes = 0;    ///< attributes read
  int64_t datasets = 0;      ///< datasets whose chunk index and data were read
  uint64_t bytes_read = 0;   ///< data bytes read through the typed reader or HDF5
};

/// Reads `path` completely: every object and attribute (values included, variable-length strings
/// too) and every dataset's layout and chunk index, as `hpctrain inspect` lists them; then, for a
/// checkpoint (root attribute format, or a step-NNNNNNNN.h5 name), read_checkpoint_file (every tensor,
/// fletcher32); for a dataset shard (format hpctrain-dataset, or a shard name), open_dataset_shard and
/// every sample through Dataset::read, as training reads them; for any other HDF5 file, every dataset's
/// data in slabs of at most 16 MiB (datasets declaring more than 1 GiB beyond their stored bytes are
/// not read). Throws UsageError naming the file and the problem when the file is not valid.
H5VerifyReport verify_h5_file(const std::string& path);

}  // namespace ht
