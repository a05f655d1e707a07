// verify_h5_file (io/h5_verify.hpp): the generic walk over every object, then the typed reader.
#include "io/h5_verify.hpp"

#include <algorithm>
#include <filesystem>
#include <regex>
#include <string_view>
#include <vector>

#include "io/checkpoint/checkpoint_format.hpp"
#include "io/checkpoint/checkpoint_store.hpp"
#include "io/dataset/dataset.hpp"
#include "io/h5.hpp"
#include "base/error.hpp"
#include "base/enum_names.hpp"

namespace fs = std::filesystem;

namespace ht {
namespace {

constexpr size_t kSlabBytes = size_t{16} << 20;
constexpr hsize_t kMaxUnstoredBytes = hsize_t{1} << 30;

struct Walk {
  std::string path;
  bool read_data = false;     // read every dataset's data (files without a typed reader)
  std::vector<std::string> skip_data;  // datasets the typed reader reads itself
  H5VerifyReport rep;
  std::string problem;        // the first failure, "/obj: what"
  void fail(const std::string& where, const std::string& what) {
    if (problem.empty()) problem = where + ": " + what + " (" + h5_error_text() + ")";
  }
};

// Reads one attribute's value into a buffer of its own size (vlen data reclaimed).
herr_t visit_attr(hid_t obj, const char* name, const H5A_info_t*, void* op) {
  auto& w = *static_cast<Walk*>(op);
  ++w.rep.attributes;
  const std::string where = std::string("attribute ") + name;
  H5Handle a(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  if (!a.valid()) return w.fail(where, "cannot be opened"), 0;
  H5Handle ftype(H5Aget_type(a), H5Tclose);
  H5Handle space(H5Aget_space(a), H5Sclose);
  if (!ftype.valid() || !space.valid()) return w.fail(where, "type or dataspace unreadable"), 0;
  const hssize_t n = H5Sget_simple_extent_npoints(space);
  if (n < 0) return w.fail(where, "dataspace unreadable"), 0;
  H5Handle mtype(H5Tget_native_type(ftype, H5T_DIR_ASCEND), H5Tclose);
  if (!mtype.valid()) mtype = H5Handle(H5Tcopy(ftype), H5Tclose);
  if (!mtype.valid()) return w.fail(where, "type unreadable"), 0;
  const size_t size = H5Tget_size(mtype);
  if (size == 0 || static_cast<uint64_t>(n) > (uint64_t{64} << 20) / size)
    return w.fail(where, "declares " + std::to_string(n) + " values of " + std::to_string(size) + " bytes"), 0;
  std::vector<unsigned char> buf(static_cast<size_t>(n) * size + 1, 0);
  if (H5Aread(a, mtype, buf.data()) < 0) return w.fail(where, "cannot be read"), 0;
  if (H5Tdetect_class(mtype, H5T_VLEN) > 0 || H5Tis_variable_str(mtype) > 0)
    H5Dvlen_reclaim(mtype, space, H5P_DEFAULT, buf.data());
  return 0;
}

// Reads a dataset's data in slabs along its first dimension.
void read_dataset_data(Walk& w, hid_t d, hid_t ftype, hid_t space, const std::string& where) {
  H5Handle mtype(H5Tget_native_type(ftype, H5T_DIR_ASCEND), H5Tclose);
  if (!mtype.valid() || H5Tdetect_class(mtype, H5T_VLEN) > 0 || H5Tis_variable_str(mtype) > 0) return;
  const size_t size = H5Tget_size(mtype);
  std::vector<hsize_t> dims = h5_space_dims(space);
  if (size == 0) return;
  hsize_t row = size;  // bytes per index of the first dimension
  for (size_t i = 1; i < dims.size(); ++i) {
    if (dims[i] != 0 && row > kMaxUnstoredBytes / dims[i]) return;  // a row beyond 1 GiB: not read
    row *= dims[i];
  }
  if (dims.empty()) {  // scalar
    std::vector<unsigned char> buf(size);
    if (H5Dread(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()) < 0) w.fail(where, "data cannot be read");
    w.rep.bytes_read += size;
    return;
  }
  if (row == 0 || dims[0] == 0) return;
  const hsize_t stored = H5Dget_storage_size(d);
  if (dims[0] > (kMaxUnstoredBytes + stored) / row) return;  // declared far beyond what is stored: not read
  const hsize_t rows_per = std::max<hsize_t>(1, kSlabBytes / row);
  std::vector<unsigned char> buf(static_cast<size_t>(std::min(rows_per, dims[0]) * row));
  for (hsize_t r = 0; r < dims[0]; r += rows_per) {
    std::vector<hsize_t> start(dims.size(), 0), count = dims;
    start[0] = r;
    count[0] = std::min(rows_per, dims[0] - r);
    H5Handle fs_(H5Scopy(space), H5Sclose);
    H5Handle ms(H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr), H5Sclose);
    if (!fs_.valid() || !ms.valid() ||
        H5Sselect_hyperslab(fs_, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr) < 0 ||
        H5Dread(d, mtype, ms, fs_, H5P_DEFAULT, buf.data()) < 0)
      return w.fail(where, "rows " + std::to_string(r) + ".." + std::to_string(r + count[0] - 1) + " cannot be read");
    w.rep.bytes_read += count[0] * row;
  }
}

// One dataset: type, space, creation properties (layout, filters), storage size, chunk index, data.
void visit_dataset(Walk& w, hid_t d, const std::string& where) {
  ++w.rep.datasets;
  H5Handle ftype(H5Dget_type(d), H5Tclose);
  H5Handle space(H5Dget_space(d), H5Sclose);
  H5Handle dcpl(H5Dget_create_plist(d), H5Pclose);
  if (!ftype.valid() || !space.valid() || !dcpl.valid()) return w.fail(where, "type, dataspace or layout unreadable");
  H5Tget_class(ftype);
  const int nf = H5Pget_nfilters(dcpl);
  for (int i = 0; i < nf; ++i) {
    unsigned flags = 0, cv[8];
    size_t ncv = 8;
    char fname[64] = {0};
    H5Pget_filter2(dcpl, static_cast<unsigned>(i), &flags, &ncv, cv, sizeof fname, fname, nullptr);
  }
  H5Dget_storage_size(d);
  if (H5Pget_layout(dcpl) == H5D_CHUNKED) {
    hsize_t nchunks = 0;
    if (H5Dget_num_chunks(d, space, &nchunks) < 0) return w.fail(where, "chunk index unreadable");
    const int nd = std::max(H5Sget_simple_extent_ndims(space), 0);
    std::vector<hsize_t> coord(static_cast<size_t>(nd) + 1);
    for (hsize_t i = 0; i < nchunks; ++i) {
      unsigned mask = 0;
      haddr_t addr = HADDR_UNDEF;
      hsize_t size = 0;
      if (H5Dget_chunk_info(d, space, i, coord.data(), &mask, &addr, &size) < 0)
        return w.fail(where, "chunk " + std::to_string(i) + " of the chunk index unreadable");
    }
  }
  if (!w.read_data || std::find(w.skip_data.begin(), w.skip_data.end(), where) != w.skip_data.end()) return;
  read_dataset_data(w, d, ftype, space, where);
}

herr_t visit_object(hid_t root, const char* name, const H5O_info_t* info, void* op) {
  auto& w = *static_cast<Walk*>(op);
  if (!w.problem.empty()) return 1;  // stop at the first problem
  ++w.rep.objects;
  std::string where = "/";
  if (std::string_view(name) != ".") where += name;
  H5Handle obj(H5Oopen(root, name, H5P_DEFAULT), H5Oclose);
  if (!obj.valid()) return w.fail(where, "object cannot be opened"), 1;
  hsize_t idx = 0;
  if (H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, &idx, visit_attr, &w) < 0) w.fail(where, "attributes unreadable");
  if (!w.problem.empty()) {
    w.problem = where + " " + w.problem;
    return 1;
  }
  if (info->type == H5O_TYPE_DATASET) visit_dataset(w, obj, where);
  return w.problem.empty() ? 0 : 1;
}

using Kind = H5FileKind;

Kind kind_of(const std::string& path, hid_t file) {
  std::string format;
  h5_read_attr_string(file, "format", format);
  const std::string name = fs::path(path).filename().string();
  static const std::regex shard_name(R"((train|test)-\d{5}-of-\d{5}\.h5)");
  const bool named_checkpoint = checkpoint_step_from_name(name) >= 0;
  const bool named_shard = std::regex_match(name, shard_name);
  // The name says what its reader will take it for (the trainer opens train-*/test-* as shards and
  // step-*.h5 as checkpoints): a format attribute that says otherwise is a wrong file in that place,
  // not a valid file of the other kind.
  if ((named_shard && format == kCheckpointFormat) || (named_checkpoint && format == "hpctrain-dataset"))
    throw UsageError(path + ": named like a " + (named_shard ? "dataset shard" : "checkpoint") +
                     " but its root attribute format = \"" + format + "\" says it is a " +
                     (named_shard ? "checkpoint" : "dataset shard"));
  if (format == kCheckpointFormat || named_checkpoint) return Kind::checkpoint;
  if (format == "hpctrain-dataset" || named_shard) return Kind::dataset_shard;
  return Kind::other;
}

// The walk over the whole file (H5Ovisit from the root, links followed once per object).
void walk_file(Walk& w) {
  H5Section quiet;
  if (H5Fis_hdf5(w.path.c_str()) <= 0) throw UsageError(w.path + ": not an HDF5 file");
  H5Handle f(H5Fopen(w.path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!f.valid()) throw UsageError(w.path + ": HDF5 cannot open the file: " + h5_open_failure_text());
  const Kind k = kind_of(w.path, f);
  w.rep.kind = k;
  w.read_data = k != Kind::checkpoint;  // read_checkpoint_file reads every tensor itself
  if (k == Kind::dataset_shard) w.skip_data = {"/images", "/labels"};
  if (H5Ovisit(f, H5_INDEX_NAME, H5_ITER_INC, visit_object, &w) < 0 && w.problem.empty())
    w.fail("/", "the object tree cannot be walked");
  if (!w.problem.empty()) throw UsageError(w.path + ": HDF5 cannot read " + w.problem);
}

// Every sample of a shard through Dataset::read, in the trainer's way, a slab at a time.
uint64_t read_all_samples(Dataset& ds) {
  const DatasetInfo& info = ds.info();
  const size_t sample = static_cast<size_t>(info.height) * info.width * info.channels;
  const int64_t per = std::max<int64_t>(1, static_cast<int64_t>(kSlabBytes / std::max<size_t>(sample, 1)));
  std::vector<uint8_t> images;
  std::vector<int32_t> labels;
  std::vector<int64_t> idx;
  uint64_t bytes = 0;
  for (int64_t first = 0; first < info.num_samples; first += per) {
    const int64_t n = std::min(per, info.num_samples - first);
    idx.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) idx[static_cast<size_t>(i)] = first + i;
    images.resize(static_cast<size_t>(n) * sample);
    labels.resize(static_cast<size_t>(n));
    ds.read(idx, images, labels);
    bytes += images.size() + labels.size() * sizeof(int32_t);
  }
  return bytes;
}

}  // namespace

const char* to_string(H5FileKind k) {
  static constexpr std::pair<H5FileKind, const char*> kNames[] = {
      {H5FileKind::checkpoint, "checkpoint"}, {H5FileKind::dataset_shard, "dataset shard"}, {H5FileKind::other, "HDF5 file"}};
  return enum_name(k, kNames);
}

H5VerifyReport verify_h5_file(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) throw UsageError(path + ": no such file");
  Walk w;
  w.path = path;
  try {
    walk_file(w);
  } catch (const UsageError&) {
    // The typed reader's words are the ones training and inspect use ("empty file (0 bytes)"):
    // prefer them when it rejects the file too (this runs in the vetting child, crashes are fine).
    const std::string name = fs::path(path).filename().string();
    static const std::regex shard_name(R"((train|test)-\d{5}-of-\d{5}\.h5)");
    if (w.rep.kind == Kind::checkpoint || (!w.rep.kind && checkpoint_step_from_name(name) >= 0))
      read_checkpoint_file(path);
    else if (w.rep.kind == Kind::dataset_shard || (!w.rep.kind && std::regex_match(name, shard_name)))
      open_dataset_shard(path);
    throw;
  }
  if (w.rep.kind == Kind::checkpoint) {
    CheckpointData d = read_checkpoint_file(path);
    w.rep.bytes_read += d.payload_bytes();
  } else if (w.rep.kind == Kind::dataset_shard) {
    auto ds = open_dataset_shard(path);
    w.rep.bytes_read += read_all_samples(*ds);
  }
  return w.rep;
}

}  // namespace ht
