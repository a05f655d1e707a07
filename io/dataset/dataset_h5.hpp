#pragma once
// Writing the dataset schema (docs/dataset.md) with the HDF5 C API (io/dataset/dataset_h5_write.cpp); the reader is
// io/dataset/dataset_h5_read.cpp (open_sharded_dataset in io/dataset/dataset.hpp). The HDF5 helpers the converters
// and `hpctrain inspect` use (H5Handle, H5Section, attribute readers) are in io/h5.hpp.
// Every HDF5 call here runs under hdf5_mutex().
#include <hdf5.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "io/dataset/dataset.hpp"
#include "io/h5.hpp"

namespace ht {

/// The shard schema version this build writes (root attribute `version`). 1: HDF5's original file
/// format (superblock 0, no metadata checksums), strings of any kind; still read, with a warning.
/// 2: HDF5 1.10's format (superblock >= 2, version-2 object headers: checksummed metadata) and
/// fixed-length strings only (no variable-length data anywhere). docs/dataset.md.
constexpr int kShardFormatVersion = 2;

/// "train-00003-of-00004.h5": the file name of shard `index` of `num_shards` of `split`.
std::string shard_file_name(const std::string& split, int index, int num_shards);

/// Samples per HDF5 chunk of /images: whole samples, about 64 KiB per chunk.
int64_t samples_per_chunk(int64_t sample_bytes);

/// The samples of an encoded shard: the image files back to back, and n + 1 offsets (0, ..., bytes.size()).
struct EncodedSamples {
  std::vector<uint8_t> bytes;
  std::vector<int64_t> offsets{0};
};

/// Writes one shard: /images uint8 [n,H,W,C] from `images` (n*H*W*C bytes, NHWC), /labels int32 [n],
/// and every root attribute of the schema (H/W/C, num_classes, class_names, mean, std, source from
/// `info`), in schema version kShardFormatVersion. The file is written under a temporary name and
/// renamed, so a crash never leaves a complete-looking shard. gzip_level 0 = uncompressed (the default
/// of the schema). Throws UsageError when sizes disagree, RuntimeError naming the file and HDF5's
/// reason when HDF5 fails (the temporary file is removed). With `encoded` (and `images` empty): the
/// encoded layout instead, /encoded uint8 [B] (64 KiB chunks) and /offsets int64 [n+1], both with
/// fletcher32, and the root attribute storage = "encoded" (docs/dataset.md "Your own images").
void write_dataset_shard(const std::string& path, const DatasetInfo& info, const std::string& split, int shard_index,
                         int num_shards, std::span<const uint8_t> images, std::span<const int32_t> labels,
                         int gzip_level = 0, const EncodedSamples* encoded = nullptr);

/// Writes `split` as num_shards files in dir: shard k holds samples [floor(k*N/S), floor((k+1)*N/S)).
/// Removes other shards of `split` already in dir first. Returns the paths written. Throws UsageError when num_shards < 1 or > N.
std::vector<std::string> write_sharded_split(const std::string& dir, const std::string& split,
                                             const DatasetInfo& info, std::span<const uint8_t> images,
                                             std::span<const int32_t> labels, int num_shards, int gzip_level = 0);

/// Rewrites the root attributes `mean` and `std` of an existing shard in place (both must already
/// hold channels floats). For converters that learn a split's statistics only after writing its
/// shards (`prepare --format imagefolder` in parallel). Throws UsageError when the sizes differ,
/// RuntimeError naming the file and HDF5's reason when HDF5 fails.
void set_shard_statistics(const std::string& path, const std::vector<float>& mean, const std::vector<float>& stdev);

/// Per-channel mean and standard deviation (population) of pixel/255 over NHWC uint8 images.
void channel_mean_std(std::span<const uint8_t> images, int channels, std::vector<float>& mean,
                      std::vector<float>& stdev);

}  // namespace ht
