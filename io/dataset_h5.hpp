#pragma once
// Writing the dataset schema (docs/dataset.md) with the HDF5 C API, and small HDF5 helpers shared by the
// reader, the converters and `hpctrain inspect`. Every HDF5 call here runs under hdf5_mutex().
#include <hdf5.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "io/dataset.hpp"

namespace ht {

/// "train-00003-of-00004.h5": the file name of shard `index` of `num_shards` of `split`.
std::string shard_file_name(const std::string& split, int index, int num_shards);

/// Samples per HDF5 chunk of /images: whole samples, about 64 KiB per chunk.
int64_t samples_per_chunk(int64_t sample_bytes);

/// Writes one shard: /images uint8 [n,H,W,C] from `images` (n*H*W*C bytes, NHWC), /labels int32 [n],
/// and every root attribute of the schema (H/W/C, num_classes, class_names, mean, std, source from
/// `info`). The file is written under a temporary name and renamed, so a crash never leaves a
/// complete-looking shard. gzip_level 0 = uncompressed (the default of the schema). Throws UsageError
/// when sizes disagree, RuntimeError when HDF5 fails.
void write_dataset_shard(const std::string& path, const DatasetInfo& info, const std::string& split, int shard_index,
                         int num_shards, std::span<const uint8_t> images, std::span<const int32_t> labels,
                         int gzip_level = 0);

/// Writes `split` as num_shards files in dir: shard k holds samples [floor(k*N/S), floor((k+1)*N/S)).
/// Removes other shards of `split` already in dir first. Returns the paths written. Throws UsageError when num_shards < 1 or > N.
std::vector<std::string> write_sharded_split(const std::string& dir, const std::string& split,
                                             const DatasetInfo& info, std::span<const uint8_t> images,
                                             std::span<const int32_t> labels, int num_shards, int gzip_level = 0);

/// Per-channel mean and standard deviation (population) of pixel/255 over NHWC uint8 images.
void channel_mean_std(std::span<const uint8_t> images, int channels, std::vector<float>& mean,
                      std::vector<float>& stdev);

/// RAII: turns off HDF5's automatic error-stack printing (we report our own message) and restores it.
class H5QuietErrors {
 public:
  H5QuietErrors();
  ~H5QuietErrors();
  H5QuietErrors(const H5QuietErrors&) = delete;
  H5QuietErrors& operator=(const H5QuietErrors&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

/// RAII owner of an hid_t with its matching close function.
class H5Handle {
 public:
  H5Handle() = default;
  H5Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~H5Handle() { reset(); }
  H5Handle(H5Handle&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = -1; }
  H5Handle& operator=(H5Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = o.id_;
      close_ = o.close_;
      o.id_ = -1;
    }
    return *this;
  }
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;
  void reset() {
    if (id_ >= 0 && close_) close_(id_);
    id_ = -1;
  }
  hid_t get() const { return id_; }
  operator hid_t() const { return id_; }
  bool valid() const { return id_ >= 0; }

 private:
  hid_t id_ = -1;
  herr_t (*close_)(hid_t) = nullptr;
};

/// Root-attribute readers (caller holds hdf5_mutex). They return false when the attribute is absent
/// or has an incompatible type class, so callers can name the attribute in their own error.
bool h5_attr_exists(hid_t obj, const char* name);
bool h5_read_attr_string(hid_t obj, const char* name, std::string& out);
bool h5_read_attr_strings(hid_t obj, const char* name, std::vector<std::string>& out);
bool h5_read_attr_int(hid_t obj, const char* name, int64_t& out);
bool h5_read_attr_floats(hid_t obj, const char* name, std::vector<float>& out);

}  // namespace ht
