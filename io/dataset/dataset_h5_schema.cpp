// Validation of one HDF5 dataset shard against the schema (io/dataset/dataset.hpp), and of the shards of a
// split against each other.
#include <sys/stat.h>

#include <cmath>
#include <cstdlib>
#include <sstream>
#include <tuple>

#include "io/dataset/augment.hpp"
#include "io/dataset/dataset_h5.hpp"
#include "io/dataset/dataset_h5_shard.hpp"
#include "io/h5_check.hpp"
#include "base/error.hpp"

namespace ht::dataset_h5 {
namespace {

std::string dims_str(const std::vector<hsize_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? "," : "") + std::to_string(d[i]);
  return s + "]";
}

void check_same(const std::string& path, const std::string& first, const char* what, const std::string& a,
                const std::string& b) {
  if (a != b)
    throw UsageError(path + ": root attribute " + what + " = " + a + " differs from " + b + " in " + first +
                     " (all shards must agree)");
}

std::string floats_str(const std::vector<float>& v) {
  std::ostringstream o;
  o << "[";
  for (size_t i = 0; i < v.size(); ++i) o << (i ? "," : "") << v[i];
  return o.str() + "]";
}

// Limits on what a shard may declare, checked before any size arithmetic or allocation.
constexpr int64_t kMaxSide = 1 << 16;             // pixels per side
constexpr int64_t kMaxChannels = 64;
constexpr int64_t kMaxClasses = 1 << 20;
constexpr int64_t kMaxSampleBytes = int64_t{1} << 28;  // 256 MiB per sample
/// A float for a message: as many digits as it takes (1e-40, not 0.000000).
std::string float_str(float v) {
  std::ostringstream o;
  o.precision(9);
  o << v;
  return o.str();
}

/// Per-channel mean and std: std finite and > 0, mean finite, and every normalised pixel value
/// ((v/255 - mean) / std, as the loader computes it) finite, so a tiny std cannot overflow to inf.
void check_mean_std(const std::string& path, const DatasetInfo& info) {
  for (size_t i = 0; i < info.std.size(); ++i) {
    const float m = info.mean[i], sd = info.std[i];
    std::string at = std::to_string(i);  // "[i]" (built in steps: GCC 12 warns falsely on "[" + ...)
    at = at.insert(0, 1, '[') + ']';
    if (!std::isfinite(sd) || !(sd > 0.f))
      throw UsageError(path + ": root attribute std" + at + " = " + float_str(sd) + ", must be finite and > 0");
    if (!std::isfinite(m))
      throw UsageError(path + ": root attribute mean" + at + " = " + float_str(m) + ", must be finite");
    for (int v : {0, 255})
      if (!std::isfinite(normalize_pixel(static_cast<uint8_t>(v), m, 1.0f / sd)))
        throw UsageError(path + ": root attributes mean" + at + " = " + float_str(m) + " and std" + at + " = " +
                         float_str(sd) + " normalise pixel value " + std::to_string(v) + " to a non-finite value");
  }
}

/// Dataset /<name> of a shard, opened and checked before any of its data is read: present (else
/// "dataset /<name> missing" + `missing_note`), openable, checksummed from format version 2 on, an
/// integer type of `bytes` bytes and `sign`; with its dataspace and shape. `dapl`: access properties.
struct CheckedDataset {
  H5Handle dataset, space;
  std::vector<hsize_t> dims;
};
CheckedDataset open_checked(const std::string& path, hid_t file, const char* name, int64_t version, size_t bytes,
                            H5T_sign_t sign, const std::string& missing_note = "", hid_t dapl = H5P_DEFAULT) {
  const std::string what = std::string("dataset /") + name;
  if (H5Lexists(file, name, H5P_DEFAULT) <= 0) throw UsageError(path + ": " + what + " missing" + missing_note);
  CheckedDataset c;
  c.dataset = H5Handle(H5Dopen2(file, name, dapl), H5Dclose);
  if (!c.dataset.valid()) throw UsageError(path + ": " + what + " cannot be opened");
  if (version >= 2) check_checksummed_object(path, what, c.dataset);
  check_integer_dtype(path, name, c.dataset, bytes, sign);
  c.space = H5Handle(H5Dget_space(c.dataset), H5Sclose);
  if (!c.space.valid()) throw UsageError(path + ": " + what + ": shape cannot be read (corrupt file)");
  c.dims = h5_space_dims(c.space);
  return c;
}

// /encoded uint8 [B] and /offsets int64 [N+1] of an encoded shard: their types and storage checked
// before anything is read, then the offsets read and checked (0 first, B last, never decreasing, no
// sample over kMaxEncodedBytes), so no read ever goes by an unchecked offset.
constexpr int64_t kMaxEncodedBytes = int64_t{1} << 30;
void open_encoded(Shard& s, const std::string& path, int64_t version, int64_t file_size) {
  const std::string note = " (storage = \"encoded\")";
  CheckedDataset enc = open_checked(path, s.file, "encoded", version, 1, H5T_SGN_NONE, note);
  s.images = std::move(enc.dataset);
  s.fspace = std::move(enc.space);
  const std::vector<hsize_t>& d = enc.dims;
  if (d.size() != 1) throw UsageError(path + ": dataset /encoded has shape " + dims_str(d) + ", expected [B]");
  check_storage(path, "encoded", s.images, d, 1, file_size);
  CheckedDataset offsets = open_checked(path, s.file, "offsets", version, 8, H5T_SGN_2, note);
  const H5Handle& off = offsets.dataset;
  const std::vector<hsize_t>& od = offsets.dims;
  if (od.size() != 1 || od[0] < 1) throw UsageError(path + ": dataset /offsets has shape " + dims_str(od) + ", expected [N+1]");
  check_storage(path, "offsets", off, od, 8, file_size);  // bounds N by what the file holds
  s.encoded_offsets.resize(od[0]);
  if (H5Dread(off, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, s.encoded_offsets.data()) < 0)
    throw UsageError(path + ": dataset /offsets cannot be read (truncated or corrupt file)");
  const auto& o = s.encoded_offsets;
  if (o.front() != 0) throw UsageError(path + ": dataset /offsets[0] = " + std::to_string(o.front()) + ", expected 0");
  if (o.back() != static_cast<int64_t>(d[0]))
    throw UsageError(path + ": dataset /offsets[" + std::to_string(o.size() - 1) + "] = " + std::to_string(o.back()) +
                     ", expected the " + std::to_string(d[0]) + " bytes of /encoded");
  for (size_t i = 1; i < o.size(); ++i)
    if (o[i] < o[i - 1] || o[i] - o[i - 1] > kMaxEncodedBytes)
      throw UsageError(path + ": dataset /offsets[" + std::to_string(i) + "] = " + std::to_string(o[i]) + " after " +
                       std::to_string(o[i - 1]) + " (offsets must not decrease; one image at most " +
                       std::to_string(kMaxEncodedBytes) + " bytes)");
  s.count = static_cast<int64_t>(o.size()) - 1;
}

}  // namespace

Shard open_shard(const std::string& path, ShardMeta& meta, std::vector<int32_t>& labels) {
  Shard s;
  s.path = path;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw UsageError(path + ": cannot open dataset shard (no such file)");
  if (st.st_size == 0) throw UsageError(path + ": dataset shard is an empty file (0 bytes); re-run hpctrain prepare");
  if (H5Fis_hdf5(path.c_str()) <= 0)
    throw UsageError(path + ": not an HDF5 file (" + std::to_string(st.st_size) + " bytes; corrupt or truncated)");
  H5Handle fapl(HT_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)), H5Pclose);
  s.file = H5Handle(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl), H5Fclose);
  if (!s.file.valid())
    throw UsageError(path + ": cannot open as HDF5 (" + std::to_string(st.st_size) + " bytes): " +
                     h5_open_failure_text());
  // The version first (an integer: no heap to parse), so that for a version-2 shard the checksummed
  // format and the absence of variable-length data are checked before any string is read.
  if (!h5_attr_exists(s.file, "format")) throw UsageError(path + ": root attribute 'format' missing (not a dataset shard)");
  int64_t& version = meta.version;
  if (!h5_read_attr_int(s.file, "version", version)) throw UsageError(path + ": root attribute 'version' missing or not an integer");
  if (version != 1 && version != kShardFormatVersion)
    throw UsageError(path + ": root attribute version = " + std::to_string(version) + ", this build reads versions 1 and " +
                     std::to_string(kShardFormatVersion));
  if (version >= 2) check_checksummed_format(path, s.file);
  std::string fmt;
  if (!h5_read_attr_string(s.file, "format", fmt)) throw UsageError(path + ": root attribute 'format' not a string");
  if (fmt != "hpctrain-dataset")
    throw UsageError(path + ": root attribute format = \"" + fmt + "\", expected \"hpctrain-dataset\"");
  auto need_int = [&](const char* name, int64_t& v) {
    if (!h5_read_attr_int(s.file, name, v))
      throw UsageError(path + ": root attribute '" + name + "' missing or not an integer");
  };
  int64_t nc = 0, h = 0, w = 0, c = 0;
  need_int("shard_index", meta.shard_index);
  need_int("num_shards", meta.num_shards);
  need_int("num_classes", nc);
  need_int("height", h);
  need_int("width", w);
  need_int("channels", c);
  if (nc < 1 || nc > kMaxClasses)
    throw UsageError(path + ": root attribute num_classes = " + std::to_string(nc) + ", must be in [1, " +
                     std::to_string(kMaxClasses) + "]");
  // Bounds before any arithmetic or narrowing: a shard's declared sizes are untrusted.
  for (auto [name, v, hi] : {std::tuple{"height", h, kMaxSide}, std::tuple{"width", w, kMaxSide},
                             std::tuple{"channels", c, kMaxChannels}})
    if (v < 1 || v > hi)
      throw UsageError(path + ": root attribute " + name + " = " + std::to_string(v) + ", must be in [1, " +
                       std::to_string(hi) + "]");
  if (h * w * c > kMaxSampleBytes)
    throw UsageError(path + ": one sample of height*width*channels = " + std::to_string(h * w * c) +
                     " bytes is over the " + std::to_string(kMaxSampleBytes) + "-byte limit");
  if (!h5_read_attr_string(s.file, "split", meta.split)) throw UsageError(path + ": root attribute 'split' missing or not a string");
  DatasetInfo& info = meta.info;
  info.num_classes = static_cast<int>(nc);
  info.height = static_cast<int>(h);
  info.width = static_cast<int>(w);
  info.channels = static_cast<int>(c);
  if (!h5_read_attr_strings(s.file, "class_names", info.class_names))
    throw UsageError(path + ": root attribute 'class_names' missing or not strings");
  if (static_cast<int64_t>(info.class_names.size()) != nc)
    throw UsageError(path + ": root attribute class_names has " + std::to_string(info.class_names.size()) +
                     " entries, num_classes = " + std::to_string(nc));
  if (!h5_read_attr_floats(s.file, "mean", info.mean)) throw UsageError(path + ": root attribute 'mean' missing or not float");
  if (!h5_read_attr_floats(s.file, "std", info.std)) throw UsageError(path + ": root attribute 'std' missing or not float");
  if (static_cast<int64_t>(info.mean.size()) != c || static_cast<int64_t>(info.std.size()) != c)
    throw UsageError(path + ": root attributes mean/std have " + std::to_string(info.mean.size()) + "/" +
                     std::to_string(info.std.size()) + " entries, channels = " + std::to_string(c));
  check_mean_std(path, info);
  if (!h5_read_attr_string(s.file, "source", info.source)) info.source.clear();

  std::string storage = "raw";
  if (h5_attr_exists(s.file, "storage") && (!h5_read_attr_string(s.file, "storage", storage) ||
                                             (storage != "raw" && storage != "encoded")))
    throw UsageError(path + ": root attribute storage = \"" + storage + "\", expected \"raw\" or \"encoded\"");
  info.encoded = storage == "encoded";
  if (info.encoded && h != w)
    throw UsageError(path + ": storage = \"encoded\" with height = " + std::to_string(h) + " and width = " + std::to_string(w) +
                     ": encoded images are decoded to a square (height = width)");
  if (info.encoded) {
    open_encoded(s, path, version, st.st_size);
  } else {
    // /images
    H5Handle dapl(HT_H5_CHECK(H5Pcreate(H5P_DATASET_ACCESS)), H5Pclose);
    // A chunk cache big enough for the whole shard's images up to 64 MiB: repeated epochs then copy
    // from memory instead of re-reading chunks (random access touches every chunk many times).
    HT_H5_CHECK(H5Pset_chunk_cache(dapl, 12421, 64u << 20, 1.0));
    CheckedDataset images = open_checked(path, s.file, "images", version, 1, H5T_SGN_NONE, "", dapl);
    s.images = std::move(images.dataset);
    s.fspace = std::move(images.space);
    const std::vector<hsize_t>& d = images.dims;
    if (d.size() != 4) throw UsageError(path + ": dataset /images has shape " + dims_str(d) + ", expected [N,H,W,C]");
    if (static_cast<int64_t>(d[1]) != h || static_cast<int64_t>(d[2]) != w || static_cast<int64_t>(d[3]) != c)
      throw UsageError(path + ": dataset /images has shape " + dims_str(d) + " but the attributes say height=" +
                       std::to_string(h) + " width=" + std::to_string(w) + " channels=" + std::to_string(c));
    if (h < 1 || w < 1 || c < 1) throw UsageError(path + ": dataset /images has empty sample shape " + dims_str(d));
    s.count = static_cast<int64_t>(d[0]);
    check_storage(path, "images", s.images, d, 1, st.st_size);
  }

  // /labels
  CheckedDataset labels_ds = open_checked(path, s.file, "labels", version, 4, H5T_SGN_2);
  const H5Handle& lab = labels_ds.dataset;
  const std::vector<hsize_t>& ld = labels_ds.dims;
  if (ld.size() != 1) throw UsageError(path + ": dataset /labels has shape " + dims_str(ld) + ", expected [N]");
  if (static_cast<int64_t>(ld[0]) != s.count)
    throw UsageError(path + ": dataset " + (info.encoded ? "/offsets has entries for " : "/images has ") + std::to_string(s.count) + " samples but /labels has " +
                     std::to_string(ld[0]) + " (lengths must match)");
  check_storage(path, "labels", lab, ld, 4, st.st_size);
  size_t base = labels.size();
  labels.resize(base + static_cast<size_t>(s.count));
  if (s.count > 0 && H5Dread(lab, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, labels.data() + base) < 0)
    throw UsageError(path + ": dataset /labels cannot be read (truncated or corrupt file)");
  for (int64_t r = 0; r < s.count; ++r) {
    int32_t v = labels[base + static_cast<size_t>(r)];
    if (v < 0 || v >= nc)
      throw UsageError(path + ": dataset /labels row " + std::to_string(r) + " has value " + std::to_string(v) +
                       ", outside [0, num_classes=" + std::to_string(nc) + ")");
  }
  // Touch the first and last sample so a file cut inside the raw data fails here, not mid-training.
  if (s.count > 0 && !info.encoded) {
    std::vector<uint8_t> buf(static_cast<size_t>(h * w * c));
    for (int64_t r : {int64_t{0}, s.count - 1}) {
      hsize_t start[4] = {static_cast<hsize_t>(r), 0, 0, 0}, cnt[4] = {1, static_cast<hsize_t>(h), static_cast<hsize_t>(w), static_cast<hsize_t>(c)};
      H5Handle ms(HT_H5_CHECK(H5Screate_simple(4, cnt, nullptr)), H5Sclose);
      HT_H5_CHECK(H5Sselect_hyperslab(s.fspace, H5S_SELECT_SET, start, nullptr, cnt, nullptr));
      if (H5Dread(s.images, H5T_NATIVE_UINT8, ms, s.fspace, H5P_DEFAULT, buf.data()) < 0)
        throw UsageError(path + ": dataset /images row " + std::to_string(r) + " cannot be read (truncated or corrupt file)");
    }
  }
  if (!getenv("HT_DATASET_HDF5_READS")) map_chunks(s, h * w * c, static_cast<int64_t>(st.st_size));
  return s;
}

void check_shard_place(const std::string& path, const ShardMeta& meta, const std::string& split, size_t index,
                       size_t num_shards) {
  const std::string& p = path;
  const ShardMeta& m = meta;
  if (m.split != split) throw UsageError(p + ": root attribute split = \"" + m.split + "\", expected \"" + split + "\"");
  if (m.shard_index != static_cast<int64_t>(index) || m.num_shards != static_cast<int64_t>(num_shards))
    throw UsageError(p + ": root attributes shard_index/num_shards = " + std::to_string(m.shard_index) + "/" +
                     std::to_string(m.num_shards) + " do not match the file name (" + std::to_string(index) + "/" +
                     std::to_string(num_shards) + ")");
}

void check_same_schema(const std::string& path, const DatasetInfo& info, const std::string& first,
                       const DatasetInfo& first_info) {
  const std::string& p = path;
  const std::string& f = first;
  auto hwc = [](const DatasetInfo& i) {
    return "H=" + std::to_string(i.height) + " W=" + std::to_string(i.width) + " C=" + std::to_string(i.channels);
  };
  if (info.height != first_info.height || info.width != first_info.width || info.channels != first_info.channels)
    throw UsageError(p + ": dataset /images samples are " + hwc(info) + " but " + f + " has " + hwc(first_info) +
                     " (all shards must agree)");
  check_same(p, f, "num_classes", std::to_string(info.num_classes), std::to_string(first_info.num_classes));
  if (info.class_names != first_info.class_names) check_same(p, f, "class_names", "(different list)", "(another list)");
  check_same(p, f, "mean", floats_str(info.mean), floats_str(first_info.mean));
  check_same(p, f, "std", floats_str(info.std), floats_str(first_info.std));
  check_same(p, f, "storage", info.encoded ? "encoded" : "raw", first_info.encoded ? "encoded" : "raw");
}

}  // namespace ht::dataset_h5
