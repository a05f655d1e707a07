// Writing HDF5 dataset shards in the schema of io/dataset/dataset.hpp, and the per-channel statistics
// stored with them.
#include "io/dataset/dataset_h5.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <regex>

#include "base/error.hpp"

namespace fs = std::filesystem;

namespace ht {

std::string shard_file_name(const std::string& split, int index, int num_shards) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "-%05d-of-%05d.h5", index, num_shards);
  return split + buf;
}

int64_t samples_per_chunk(int64_t sample_bytes) {
  return std::max<int64_t>(1, (64 * 1024) / std::max<int64_t>(1, sample_bytes));
}

namespace {

// Attribute writers: every failure throws H5Fail with HDF5's own reason (write_dataset_shard adds the
// file). Strings are fixed-length (NUL-padded, UTF-8): a variable-length string lives in HDF5's
// global heap, whose parsing in a damaged file is where HDF5 1.10 itself overflows its buffers.

// A fixed-length UTF-8 string type of `size` bytes (at least 1: HDF5 has no zero-length strings).
H5Handle fixed_string_type(size_t size) {
  H5Handle t(h5(H5Tcopy(H5T_C_S1), "H5Tcopy"), H5Tclose);
  h5(H5Tset_size(t, std::max<size_t>(size, 1)), "H5Tset_size");
  h5(H5Tset_strpad(t, H5T_STR_NULLPAD), "H5Tset_strpad");
  h5(H5Tset_cset(t, H5T_CSET_UTF8), "H5Tset_cset");
  return t;
}

void write_attr_string(hid_t obj, const char* name, const std::string& v) {
  H5Handle type = fixed_string_type(v.size());
  H5Handle space(h5(H5Screate(H5S_SCALAR), "H5Screate"), H5Sclose);
  H5Handle a(h5(H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT), std::string("create attribute ") + name),
             H5Aclose);
  std::string buf = v;
  buf.resize(std::max<size_t>(v.size(), 1), '\0');
  h5(H5Awrite(a, type, buf.data()), std::string("write attribute ") + name);
}

// A 1-D array of fixed-length strings, each NUL-padded to the longest.
void write_attr_strings(hid_t obj, const char* name, const std::vector<std::string>& v) {
  size_t len = 1;
  for (auto& s : v) len = std::max(len, s.size());
  H5Handle type = fixed_string_type(len);
  hsize_t n = v.size();
  H5Handle space(h5(H5Screate_simple(1, &n, nullptr), "H5Screate_simple"), H5Sclose);
  H5Handle a(h5(H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT), std::string("create attribute ") + name),
             H5Aclose);
  std::vector<char> buf(len * v.size() + 1, '\0');
  for (size_t i = 0; i < v.size(); ++i) std::copy(v[i].begin(), v[i].end(), buf.begin() + static_cast<std::ptrdiff_t>(i * len));
  h5(H5Awrite(a, type, buf.data()), std::string("write attribute ") + name);
}

void write_attr_int(hid_t obj, const char* name, int64_t v) {
  H5Handle space(h5(H5Screate(H5S_SCALAR), "H5Screate"), H5Sclose);
  H5Handle a(h5(H5Acreate2(obj, name, H5T_STD_I32LE, space, H5P_DEFAULT, H5P_DEFAULT), std::string("create attribute ") + name),
             H5Aclose);
  int32_t x = static_cast<int32_t>(v);
  h5(H5Awrite(a, H5T_NATIVE_INT32, &x), std::string("write attribute ") + name);
}

void write_attr_floats(hid_t obj, const char* name, const std::vector<float>& v) {
  hsize_t n = v.size();
  H5Handle space(h5(H5Screate_simple(1, &n, nullptr), "H5Screate_simple"), H5Sclose);
  H5Handle a(h5(H5Acreate2(obj, name, H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT), std::string("create attribute ") + name),
             H5Aclose);
  h5(H5Awrite(a, H5T_NATIVE_FLOAT, v.data()), std::string("write attribute ") + name);
}

// A 1-D dataset `name` of n elements of `type` from `data`, chunked (chunk_elems) with fletcher32
// (and deflate at gzip_level > 0) when not empty.
void write_1d(hid_t file, const char* name, hid_t file_type, hid_t mem_type, hsize_t n, hsize_t chunk_elems,
              const void* data, int gzip_level) {
  H5Handle space(h5(H5Screate_simple(1, &n, nullptr), "H5Screate_simple"), H5Sclose);
  H5Handle dcpl(h5(H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate"), H5Pclose);
  if (n > 0) {
    hsize_t chunk = std::min<hsize_t>(n, chunk_elems);
    h5(H5Pset_chunk(dcpl, 1, &chunk), "H5Pset_chunk");
    if (gzip_level > 0) h5(H5Pset_deflate(dcpl, static_cast<unsigned>(gzip_level)), "H5Pset_deflate");
    h5(H5Pset_fletcher32(dcpl), "H5Pset_fletcher32");
  }
  H5Handle d(h5(H5Dcreate2(file, name, file_type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT), std::string("create /") + name),
             H5Dclose);
  if (n > 0) h5(H5Dwrite(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), std::string("write /") + name);
}

// The shard's HDF5 objects in the file `tmp` (see write_dataset_shard); `encoded` non-null: the
// encoded layout (/encoded, /offsets) instead of /images. Throws H5Fail.
void write_shard_objects(const std::string& tmp, const DatasetInfo& info, const std::string& split, int shard_index,
                         int num_shards, std::span<const uint8_t> images, std::span<const int32_t> labels,
                         int gzip_level, const EncodedSamples* encoded = nullptr) {
  const int64_t n = static_cast<int64_t>(labels.size());
  const int64_t sample = static_cast<int64_t>(info.height) * info.width * info.channels;
  H5Handle fapl(h5(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate"), H5Pclose);
  // Schema version 2: HDF5 1.10's file format (superblock 3, version-2 object headers, fixed-array
  // chunk index), whose metadata all carry checksums; the upper bound keeps the file readable by
  // HDF5 1.10 whichever newer library writes it.
  h5(H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_V110), "H5Pset_libver_bounds");
  H5Handle file(h5(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl), "create file"), H5Fclose);
  if (encoded) {  // the image files' bytes, 64 KiB chunks; offsets of each sample's first byte, and the end
    write_1d(file, "encoded", H5T_STD_U8LE, H5T_NATIVE_UINT8, encoded->bytes.size(), 64 * 1024, encoded->bytes.data(), gzip_level);
    write_1d(file, "offsets", H5T_STD_I64LE, H5T_NATIVE_INT64, encoded->offsets.size(), 16384, encoded->offsets.data(), 0);
  }
  // /images uint8 [n,H,W,C], chunks of whole samples.
  hsize_t dims[4] = {static_cast<hsize_t>(n), static_cast<hsize_t>(info.height), static_cast<hsize_t>(info.width),
                     static_cast<hsize_t>(info.channels)};
  hsize_t chunk[4] = {static_cast<hsize_t>(std::max<int64_t>(1, std::min(n, samples_per_chunk(sample)))), dims[1],
                      dims[2], dims[3]};
  H5Handle space(h5(H5Screate_simple(4, dims, nullptr), "H5Screate_simple"), H5Sclose);
  H5Handle dcpl(h5(H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate"), H5Pclose);
  if (n > 0) {
    h5(H5Pset_chunk(dcpl, 4, chunk), "H5Pset_chunk");
    if (gzip_level > 0) h5(H5Pset_deflate(dcpl, static_cast<unsigned>(gzip_level)), "H5Pset_deflate");
    // Every chunk's bytes checksummed too (the metadata already are): a flipped pixel is an error,
    // not a silently different sample. The reader verifies it on both of its paths.
    h5(H5Pset_fletcher32(dcpl), "H5Pset_fletcher32");
  }
  H5Handle img;
  if (!encoded) {
    img = H5Handle(h5(H5Dcreate2(file, "images", H5T_STD_U8LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT), "create /images"),
                   H5Dclose);
    if (n > 0) h5(H5Dwrite(img, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, images.data()), "write /images");
  }
  // /labels int32 [n]
  hsize_t ln = static_cast<hsize_t>(n);
  H5Handle lspace(h5(H5Screate_simple(1, &ln, nullptr), "H5Screate_simple"), H5Sclose);
  H5Handle ldcpl(h5(H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate"), H5Pclose);
  if (n > 0) {  // chunked only to carry fletcher32, as /images
    hsize_t lchunk = std::min<hsize_t>(ln, 16384);
    h5(H5Pset_chunk(ldcpl, 1, &lchunk), "H5Pset_chunk");
    h5(H5Pset_fletcher32(ldcpl), "H5Pset_fletcher32");
  }
  H5Handle lab(h5(H5Dcreate2(file, "labels", H5T_STD_I32LE, lspace, H5P_DEFAULT, ldcpl, H5P_DEFAULT), "create /labels"),
               H5Dclose);
  if (n > 0) h5(H5Dwrite(lab, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, labels.data()), "write /labels");
  write_attr_string(file, "format", "hpctrain-dataset");
  write_attr_int(file, "version", kShardFormatVersion);
  write_attr_string(file, "split", split);
  write_attr_int(file, "shard_index", shard_index);
  write_attr_int(file, "num_shards", num_shards);
  write_attr_int(file, "num_classes", info.num_classes);
  write_attr_int(file, "height", info.height);
  write_attr_int(file, "width", info.width);
  write_attr_int(file, "channels", info.channels);
  write_attr_strings(file, "class_names", info.class_names);
  write_attr_floats(file, "mean", info.mean);
  write_attr_floats(file, "std", info.std);
  write_attr_string(file, "source", info.source);
  if (encoded) write_attr_string(file, "storage", "encoded");
  lab.reset();
  img.reset();
  h5(H5Fflush(file, H5F_SCOPE_GLOBAL), "flush");
  file.close_checked("close");
}

}  // namespace

void channel_mean_std(std::span<const uint8_t> images, int channels, std::vector<float>& mean,
                      std::vector<float>& stdev) {
  std::vector<double> s(static_cast<size_t>(channels), 0.0), s2(static_cast<size_t>(channels), 0.0);
  std::vector<uint64_t> hist(static_cast<size_t>(channels) * 256, 0);
  for (size_t i = 0; i < images.size(); ++i) hist[(i % channels) * 256 + images[i]]++;
  int64_t per_channel = channels ? static_cast<int64_t>(images.size()) / channels : 0;
  mean.assign(static_cast<size_t>(channels), 0.f);
  stdev.assign(static_cast<size_t>(channels), 0.f);
  for (int c = 0; c < channels; ++c) {
    for (int v = 0; v < 256; ++v) {
      double x = v / 255.0;
      double k = static_cast<double>(hist[static_cast<size_t>(c) * 256 + v]);
      s[c] += k * x;
      s2[c] += k * x * x;
    }
    double m = per_channel ? s[c] / per_channel : 0.0;
    double var = per_channel ? std::max(0.0, s2[c] / per_channel - m * m) : 0.0;
    mean[c] = static_cast<float>(m);
    stdev[c] = static_cast<float>(std::sqrt(var));
  }
}

void set_shard_statistics(const std::string& path, const std::vector<float>& mean, const std::vector<float>& stdev) {
  try {
    H5Section section;
    H5Handle file(h5(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), "open file"), H5Fclose);
    for (auto [name, v] : {std::pair<const char*, const std::vector<float>*>{"mean", &mean}, {"std", &stdev}}) {
      H5Handle a(h5(H5Aopen(file, name, H5P_DEFAULT), std::string("open attribute ") + name), H5Aclose);
      H5Handle space(h5(H5Aget_space(a), "H5Aget_space"), H5Sclose);
      if (H5Sget_simple_extent_npoints(space) != static_cast<hssize_t>(v->size()))
        throw UsageError(path + ": attribute " + name + " holds " + std::to_string(H5Sget_simple_extent_npoints(space)) +
                         " values, not " + std::to_string(v->size()));
      h5(H5Awrite(a, H5T_NATIVE_FLOAT, v->data()), std::string("write attribute ") + name);
    }
    h5(H5Fflush(file, H5F_SCOPE_GLOBAL), "flush");
    file.close_checked("close");
  } catch (const H5Fail& e) {
    throw RuntimeError(path + ": updating mean/std failed: " + e.what());
  }
}

void write_dataset_shard(const std::string& path, const DatasetInfo& info, const std::string& split, int shard_index,
                         int num_shards, std::span<const uint8_t> images, std::span<const int32_t> labels,
                         int gzip_level, const EncodedSamples* encoded) {
  const int64_t n = static_cast<int64_t>(labels.size());
  const int64_t sample = static_cast<int64_t>(info.height) * info.width * info.channels;
  if (encoded && (static_cast<int64_t>(encoded->offsets.size()) != n + 1 || encoded->offsets.front() != 0 ||
                  encoded->offsets.back() != static_cast<int64_t>(encoded->bytes.size()) || !images.empty()))
    throw UsageError(path + ": " + std::to_string(encoded->offsets.size()) + " offsets for " + std::to_string(n) +
                     " encoded samples of " + std::to_string(encoded->bytes.size()) + " bytes");
  if (!encoded && (sample <= 0 || static_cast<int64_t>(images.size()) != n * sample))
    throw UsageError(path + ": " + std::to_string(images.size()) + " image bytes for " + std::to_string(n) +
                     " labels of " + std::to_string(info.height) + "x" + std::to_string(info.width) + "x" +
                     std::to_string(info.channels));
  if (static_cast<int>(info.class_names.size()) != info.num_classes || static_cast<int>(info.mean.size()) != info.channels ||
      static_cast<int>(info.std.size()) != info.channels)
    throw UsageError(path + ": class_names/mean/std sizes do not match num_classes/channels");
  const std::string tmp = path + ".tmp";
  try {
    H5Section section;  // the HDF5 lock, HDF5's own error printing off (the error names the reason)
    write_shard_objects(tmp, info, split, shard_index, num_shards, images, labels, gzip_level, encoded);
  } catch (const H5Fail& e) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw RuntimeError(tmp + ": writing the dataset shard failed: " + e.what());
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw RuntimeError("cannot rename " + tmp + " to " + path + ": " + ec.message());
}

std::vector<std::string> write_sharded_split(const std::string& dir, const std::string& split,
                                             const DatasetInfo& info, std::span<const uint8_t> images,
                                             std::span<const int32_t> labels, int num_shards, int gzip_level) {
  const int64_t n = static_cast<int64_t>(labels.size());
  if (num_shards < 1 || num_shards > std::max<int64_t>(1, n))
    throw UsageError("--shards " + std::to_string(num_shards) + ": must be in [1, " + std::to_string(n) +
                     "] for the " + std::to_string(n) + " samples of split " + split);
  const size_t sample = static_cast<size_t>(info.height) * info.width * info.channels;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw UsageError(dir + ": cannot create output directory: " + ec.message());
  // Shards of an earlier run with another shard count would make the set inconsistent: remove them.
  std::regex old(split + R"(-\d{5}-of-\d{5}\.h5)");
  for (auto& e : fs::directory_iterator(dir, ec))
    if (std::regex_match(e.path().filename().string(), old)) fs::remove(e.path(), ec);
  std::vector<std::string> paths;
  for (int k = 0; k < num_shards; ++k) {
    int64_t b = n * k / num_shards, e = n * (k + 1) / num_shards;
    std::string p = (fs::path(dir) / shard_file_name(split, k, num_shards)).string();
    write_dataset_shard(p, info, split, k, num_shards, images.subspan(static_cast<size_t>(b) * sample, static_cast<size_t>(e - b) * sample),
                        labels.subspan(static_cast<size_t>(b), static_cast<size_t>(e - b)), gzip_level);
    paths.push_back(p);
  }
  return paths;
}

}  // namespace ht
