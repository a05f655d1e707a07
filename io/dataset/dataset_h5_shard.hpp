#pragma once
// Internal to the HDF5 dataset reader (io/dataset/dataset_h5_read.cpp, io/dataset/dataset_h5_schema.cpp): one open
// shard file, its validation against the schema of io/dataset/dataset.hpp, and its direct-access map.
// Everything here runs under hdf5_mutex() unless said otherwise.
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "io/dataset/dataset.hpp"
#include "io/h5.hpp"

namespace ht::dataset_h5 {

/// A POSIX descriptor closed on destruction.
struct Fd {
  int fd = -1;
  Fd() = default;
  Fd(Fd&& o) noexcept : fd(o.fd) { o.fd = -1; }
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd, o.fd);
    return *this;
  }
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

/// One open shard file: its HDF5 handles, its samples [offset, offset + count) of the split, and
/// the map for direct reads.
struct Shard {
  std::string path;
  H5Handle file, images, fspace;  ///< /images, or /encoded for an encoded shard
  int64_t count = 0, offset = 0;
  std::vector<int64_t> encoded_offsets;  ///< encoded shards: count + 1 validated byte offsets into /encoded
  // Direct access: for uncompressed /images (or /encoded), the file address of every chunk (per_chunk samples
  // each; one "chunk" for a contiguous layout). Samples are then read with pread() (as fast as the
  // HDF5 chunk cache here, and thread-safe) without hdf5_mutex, so a checkpoint being written never
  // stalls the data pipeline. pread rather than mmap: a file truncated under a running job gives an
  // error message, not SIGBUS.
  // With HDF5's fletcher32 filter (schema version 2 writes it) each stored chunk is its per_chunk rows
  // (an edge chunk padded) and 4 bytes of checksum: the first read of a chunk reads it whole and
  // verifies it; later reads of its rows trust that verdict (`verified`, set once per chunk).
  Fd fd;
  int64_t per_chunk = 0;
  std::vector<uint64_t> chunk_addr;
  bool checksummed = false;
  std::unique_ptr<std::atomic<uint8_t>[]> verified;  ///< one flag per chunk; null unless checksummed
  /// For messages: the dataset read, and what its rows are.
  std::string data_name() const { return encoded_offsets.empty() ? "/images" : "/encoded"; }
  std::string unit() const { return encoded_offsets.empty() ? "rows" : "bytes"; }
};

/// What a shard's root attributes say about the shard itself and about the dataset.
struct ShardMeta {
  std::string split;
  int64_t version = 0;  ///< schema version (root attribute `version`): 1 or 2
  int64_t shard_index = -1, num_shards = -1;
  DatasetInfo info;
};

/// Opens the shard file `path`, checks it on its own (HDF5 file, format/version and, for version 2,
/// the checksummed format; every attribute; /images uint8 [N,H,W,C] and /labels int32 [N] of equal
/// length and their storage (check_storage); labels in [0, num_classes); first and last image row
/// readable), appends its labels to `labels` and maps its chunks for direct
/// reads (see map_chunks) unless HT_DATASET_HDF5_READS is set. Throws UsageError naming the file and
/// the problem. Caller holds hdf5_mutex().
Shard open_shard(const std::string& path, ShardMeta& meta, std::vector<int32_t>& labels);

/// Throws UsageError naming `path` when its split or shard_index/num_shards disagree with `split`
/// and the file's place `index` among `num_shards` (from the file names).
void check_shard_place(const std::string& path, const ShardMeta& meta, const std::string& split, size_t index,
                       size_t num_shards);

/// Throws UsageError naming `path` and `first` when `info` (of path) and `first_info` (of the first
/// shard, `first`) disagree on H/W/C, num_classes, class_names, mean or std (all shards must agree).
void check_same_schema(const std::string& path, const DatasetInfo& info, const std::string& first,
                       const DatasetInfo& first_info);

// ---- io/dataset/dataset_h5_storage.cpp: how the objects are stored, checked before anything is read ----

/// For a version-2 shard: throws UsageError naming `path` unless the file has superblock version >= 2
/// and the root group passes check_checksummed_object. Run before any attribute value is read.
void check_checksummed_format(const std::string& path, hid_t file);

/// For a version-2 shard: throws UsageError naming `path` and `what` ("root group", "dataset /images")
/// unless `obj` has a version-2 (checksummed) object header and no attribute of a type that lives in
/// HDF5's global heap (variable-length strings or sequences, references).
void check_checksummed_object(const std::string& path, const std::string& what, hid_t obj);

/// Throws UsageError naming `path`, dataset `name`, the dtype found and the one expected unless the
/// dataset's type is a plain integer of `bytes` bytes with `sign` (all bits value bits, offset 0).
void check_integer_dtype(const std::string& path, const char* name, hid_t dset, size_t bytes, H5T_sign_t sign);

/// The storage of dataset `name` (of shape `dims`, `elem_bytes` per element) against what it declares,
/// before anything is read from it. Layout contiguous, chunked or compact, inside the file (external
/// raw files and virtual datasets are rejected); filters only deflate, shuffle, fletcher32; compact
/// data exactly the declared size; unfiltered data at least the declared bytes stored; compressed
/// data declaring at most the file's size times zlib's best ratio; chunked data with every chunk
/// stored (a missing chunk would read as the fill value). UsageError naming file, dataset, values.
void check_storage(const std::string& path, const char* name, hid_t dset, const std::vector<hsize_t>& dims,
                   uint64_t elem_bytes, int64_t file_bytes);

/// Fills the direct-access map of an uncompressed shard when the layout allows it (`sample` bytes per
/// sample; `file_size` the file's size); returns quietly (HDF5 reads are used) otherwise. Throws
/// UsageError when a chunk lies beyond the end of the file.
void map_chunks(Shard& s, int64_t sample, int64_t file_size);

}  // namespace ht::dataset_h5
