// Shard file format (docs/dataset.md "File format and versions"): what write_dataset_shard writes,
// read back with the HDF5 C API alone, and version-1 shards written the old way still read.
#include <catch2/catch.hpp>

#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "io/dataset/dataset.hpp"
#include "io/dataset/dataset_h5.hpp"
#include "io/dataset/dataset_h5_shard.hpp"

namespace fs = std::filesystem;
using namespace ht;

namespace {

std::string temp_path(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("ht_test_format_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return (d / name).string();
}

DatasetInfo small_info() {
  DatasetInfo info;
  info.height = 3;
  info.width = 2;
  info.channels = 2;
  info.num_classes = 3;
  info.class_names = {"cat", "a much longer class name", "\xc3\x87" "at"};  // "Çat" in UTF-8
  info.mean = {0.25f, 0.5f};
  info.std = {0.125f, 0.375f};
  info.source = "";  // empty strings round-trip too
  return info;
}

struct AttrType {
  std::string name;
  H5T_class_t cls;
  bool variable;
};

herr_t collect(hid_t obj, const char* name, const H5A_info_t*, void* out) {
  hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
  hid_t t = H5Aget_type(a);
  static_cast<std::vector<AttrType>*>(out)->push_back(
      {name, H5Tget_class(t), H5Tget_class(t) == H5T_STRING && H5Tis_variable_str(t) > 0});
  H5Tclose(t);
  H5Aclose(a);
  return 0;
}

std::string read_fixed_string(hid_t obj, const char* name) {
  hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
  hid_t t = H5Aget_type(a);
  std::string v(H5Tget_size(t), '\0');
  H5Aread(a, t, v.data());
  H5Tclose(t);
  H5Aclose(a);
  return v.substr(0, v.find('\0'));
}

int object_header_version(hid_t loc, const char* name) {
  H5O_info_t oi{};
  hid_t o = H5Oopen(loc, name, H5P_DEFAULT);
  H5Oget_info2(o, &oi, H5O_INFO_HDR);
  H5Oclose(o);
  return static_cast<int>(oi.hdr.version);
}

// A shard as hpctrain wrote it before schema version 2: default file access (HDF5's original
// format), variable-length UTF-8 strings, version 1.
void write_version1_shard(const std::string& path, const DatasetInfo& info, const std::vector<uint8_t>& images,
                          const std::vector<int32_t>& labels) {
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  hsize_t dims[4] = {labels.size(), 3, 2, 2}, n = labels.size();
  hid_t s = H5Screate_simple(4, dims, nullptr);
  hid_t d = H5Dcreate2(f, "images", H5T_STD_U8LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, images.data());
  H5Dclose(d);
  H5Sclose(s);
  s = H5Screate_simple(1, &n, nullptr);
  d = H5Dcreate2(f, "labels", H5T_STD_I32LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, labels.data());
  H5Dclose(d);
  H5Sclose(s);
  H5Handle vstr = h5_vlen_string_type();
  auto str = [&](const char* name, const std::vector<std::string>& v, bool scalar) {
    hsize_t k = v.size();
    hid_t sp = scalar ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &k, nullptr);
    hid_t a = H5Acreate2(f, name, vstr, sp, H5P_DEFAULT, H5P_DEFAULT);
    std::vector<const char*> p;
    for (auto& x : v) p.push_back(x.c_str());
    H5Awrite(a, vstr, p.data());
    H5Aclose(a);
    H5Sclose(sp);
  };
  auto num = [&](const char* name, hid_t ft, hid_t mt, const void* v, hsize_t k) {
    hid_t sp = k == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &k, nullptr);
    hid_t a = H5Acreate2(f, name, ft, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, mt, v);
    H5Aclose(a);
    H5Sclose(sp);
  };
  int32_t one = 1, zero = 0, nc = info.num_classes, h = info.height, w = info.width, c = info.channels;
  str("format", {"hpctrain-dataset"}, true);
  num("version", H5T_STD_I32LE, H5T_NATIVE_INT32, &one, 0);
  str("split", {"train"}, true);
  num("shard_index", H5T_STD_I32LE, H5T_NATIVE_INT32, &zero, 0);
  num("num_shards", H5T_STD_I32LE, H5T_NATIVE_INT32, &one, 0);
  num("num_classes", H5T_STD_I32LE, H5T_NATIVE_INT32, &nc, 0);
  num("height", H5T_STD_I32LE, H5T_NATIVE_INT32, &h, 0);
  num("width", H5T_STD_I32LE, H5T_NATIVE_INT32, &w, 0);
  num("channels", H5T_STD_I32LE, H5T_NATIVE_INT32, &c, 0);
  str("class_names", info.class_names, false);
  num("mean", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, info.mean.data(), info.mean.size());
  num("std", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, info.std.data(), info.std.size());
  str("source", {"old writer"}, true);
  H5Fclose(f);
}

}  // namespace

TEST_CASE("shard format: a new shard has superblock >= 2, v2 object headers, fixed-length strings only",
          "[dataset][format]") {
  const DatasetInfo info = small_info();
  std::vector<uint8_t> images(5 * 12);
  for (size_t i = 0; i < images.size(); ++i) images[i] = static_cast<uint8_t>(i * 7);
  std::vector<int32_t> labels = {0, 1, 2, 1, 0};
  const std::string path = temp_path("new.h5");
  write_dataset_shard(path, info, "train", 0, 1, images, labels);

  std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  REQUIRE(f >= 0);
  H5F_info2_t fi{};
  REQUIRE(H5Fget_info2(f, &fi) >= 0);
  CHECK(fi.super.version >= 2);  // HDF5 1.10 with libver V110: superblock 3
  CHECK(object_header_version(f, "/") == 2);
  CHECK(object_header_version(f, "images") == 2);
  CHECK(object_header_version(f, "labels") == 2);
  std::vector<AttrType> attrs;
  hsize_t idx = 0;
  REQUIRE(H5Aiterate2(f, H5_INDEX_NAME, H5_ITER_INC, &idx, collect, &attrs) >= 0);
  CHECK(attrs.size() == 13);
  int strings = 0;
  for (auto& a : attrs) {
    INFO("attribute " << a.name);
    CHECK_FALSE(a.variable);
    CHECK(a.cls != H5T_VLEN);
    CHECK(a.cls != H5T_REFERENCE);
    strings += a.cls == H5T_STRING;
  }
  CHECK(strings == 4);  // format, split, class_names, source
  CHECK(read_fixed_string(f, "format") == "hpctrain-dataset");
  CHECK(read_fixed_string(f, "split") == "train");
  int32_t version = 0;
  hid_t a = H5Aopen(f, "version", H5P_DEFAULT);
  H5Aread(a, H5T_NATIVE_INT32, &version);
  H5Aclose(a);
  CHECK(version == kShardFormatVersion);
  CHECK(version == 2);
  H5Fclose(f);

  // The reader gives back every value, UTF-8 and empty strings included.
  auto ds = open_dataset_shard(path);
  CHECK(ds->info().class_names == info.class_names);
  CHECK(ds->info().source.empty());
  CHECK(ds->info().mean == info.mean);
  CHECK(ds->info().version1_shards.empty());
  std::vector<int64_t> all = {4, 0, 3, 1, 2};
  std::vector<uint8_t> img(5 * 12);
  std::vector<int32_t> lab(5);
  ds->read(all, img, lab);
  for (size_t k = 0; k < all.size(); ++k) {
    CHECK(lab[k] == labels[static_cast<size_t>(all[k])]);
    CHECK(std::equal(img.begin() + static_cast<std::ptrdiff_t>(k * 12), img.begin() + static_cast<std::ptrdiff_t>(k * 12 + 12),
                     images.begin() + all[k] * 12));
  }
  fs::remove(path);
}

TEST_CASE("shard format: an uncompressed shard is served by pread through its chunk map", "[dataset][format]") {
  // HDF5 1.10 refuses H5S_ALL in H5Dget_num_chunks: the map was never built and every read took the
  // HDF5 lock. An uncompressed shard must be mapped; a compressed one is read by HDF5.
  const DatasetInfo info = small_info();
  std::vector<uint8_t> images(40 * 12, 9);
  std::vector<int32_t> labels(40, 1);
  for (int gzip : {0, 4}) {
    INFO("gzip " << gzip);
    const std::string path = temp_path("map" + std::to_string(gzip) + ".h5");
    write_dataset_shard(path, info, "train", 0, 1, images, labels, gzip);
    H5Section section;
    dataset_h5::ShardMeta meta;
    std::vector<int32_t> lab;
    dataset_h5::Shard s = dataset_h5::open_shard(path, meta, lab);
    CHECK(meta.version == 2);
    CHECK(lab == labels);
    if (gzip == 0) {
      CHECK(s.fd.fd >= 0);
      CHECK(s.per_chunk == 40);
      CHECK(s.chunk_addr.size() == 1);
    } else {
      CHECK(s.fd.fd < 0);
    }
    fs::remove(path);
  }
}

TEST_CASE("shard format: a version-1 shard written the old way (superblock 0, variable-length strings) still reads",
          "[dataset][format]") {
  const DatasetInfo info = small_info();
  std::vector<uint8_t> images(4 * 12);
  for (size_t i = 0; i < images.size(); ++i) images[i] = static_cast<uint8_t>(255 - i);
  std::vector<int32_t> labels = {2, 0, 1, 2};
  const std::string path = temp_path("train-00000-of-00001.h5");
  {
    std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
    write_version1_shard(path, info, images, labels);
    hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    H5F_info2_t fi{};
    H5Fget_info2(f, &fi);
    CHECK(fi.super.version == 0);  // really the old format
    H5Fclose(f);
  }
  auto ds = open_sharded_dataset(fs::path(path).parent_path().string(), "train");
  const DatasetInfo& got = ds->info();
  CHECK(got.num_samples == 4);
  CHECK(got.class_names == info.class_names);
  CHECK(got.source == "old writer");
  REQUIRE(got.version1_shards.size() == 1);
  CHECK(got.version1_shards[0] == path);
  std::vector<int64_t> all = {0, 1, 2, 3};
  std::vector<uint8_t> img(4 * 12);
  std::vector<int32_t> lab(4);
  ds->read(all, img, lab);
  CHECK(img == images);
  CHECK(lab == labels);
  ds.reset();
  fs::remove_all(fs::path(path).parent_path());
}

TEST_CASE("shard format: a flipped pixel byte of a new shard fails its fletcher32 on both read paths",
          "[dataset][format]") {
  // Version-2 shards checksum their data chunks (fletcher32): a changed byte is an error, never a
  // silently different sample. Uncompressed: the pread path verifies each chunk on its first read;
  // compressed: HDF5's filter pipeline does.
  const DatasetInfo info = small_info();
  // 12000 samples of 12 bytes: three 64 KiB chunks; the flipped byte is in the middle one, which
  // the open (reading the first and last rows) does not touch.
  const int64_t n = 12000, per = 65536 / 12;
  std::vector<uint8_t> images(static_cast<size_t>(n) * 12);
  for (size_t i = 0; i < images.size(); ++i) images[i] = static_cast<uint8_t>(i * 13 + 1);
  std::vector<int32_t> labels(static_cast<size_t>(n), 2);
  for (int gzip : {0, 4}) {
    INFO("gzip " << gzip);
    const std::string dir = temp_path("flip" + std::to_string(gzip));
    fs::create_directories(dir);
    const std::string path = dir + "/train-00000-of-00001.h5";
    write_dataset_shard(path, info, "train", 0, 1, images, labels, gzip);
    haddr_t addr = HADDR_UNDEF;
    hsize_t stored = 0;
    {
      std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
      hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
      hid_t d = H5Dopen2(f, "images", H5P_DEFAULT);
      hid_t sp = H5Dget_space(d);
      hsize_t coord[4];
      unsigned mask = 0;
      hsize_t nchunks = 0;
      REQUIRE(H5Dget_num_chunks(d, sp, &nchunks) >= 0);
      REQUIRE(nchunks == 3);
      REQUIRE(H5Dget_chunk_info(d, sp, 1, coord, &mask, &addr, &stored) >= 0);
      REQUIRE(coord[0] == static_cast<hsize_t>(per));
      hid_t pl = H5Dget_create_plist(d);
      CHECK(H5Pget_nfilters(pl) == (gzip ? 2 : 1));  // [deflate,] fletcher32
      H5Pclose(pl);
      H5Sclose(sp);
      H5Dclose(d);
      H5Fclose(f);
    }
    if (gzip == 0) CHECK(stored == static_cast<hsize_t>(per) * 12 + 4);
    {  // the intact shard reads back exactly, through the map when uncompressed
      auto ds = open_sharded_dataset(dir, "train");
      std::vector<int64_t> idx = {7, per + 3, n - 1};
      std::vector<uint8_t> img(3 * 12);
      std::vector<int32_t> lab(3);
      ds->read(idx, img, lab);
      CHECK(std::equal(img.begin(), img.begin() + 12, images.begin() + 7 * 12));
      CHECK(std::equal(img.begin() + 12, img.begin() + 24, images.begin() + (per + 3) * 12));
      CHECK(std::equal(img.begin() + 24, img.end(), images.begin() + (n - 1) * 12));
    }
    {
      std::fstream io(path, std::ios::in | std::ios::out | std::ios::binary);
      io.seekg(static_cast<std::streamoff>(addr + stored / 2));
      char b = 0;
      io.read(&b, 1);
      b = static_cast<char>(b ^ 0x10);
      io.seekp(static_cast<std::streamoff>(addr + stored / 2));
      io.write(&b, 1);
    }
    bool rejected = false;
    try {
      auto ds = open_sharded_dataset(dir, "train");
      std::vector<int64_t> idx = {per + 20};
      std::vector<uint8_t> img(12);
      std::vector<int32_t> lab(1);
      ds->read(idx, img, lab);
    } catch (const std::exception& e) {
      rejected = true;
      INFO(e.what());
      CHECK(std::string(e.what()).find(path) != std::string::npos);
      if (gzip == 0) CHECK(std::string(e.what()).find("fletcher32") != std::string::npos);
    }
    CHECK(rejected);
    fs::remove_all(dir);
  }
}
