// The checkpoint reader and validator (io/checkpoint_format.hpp): every dataset is read back, so
// HDF5 verifies every fletcher32 checksum, and the structure is checked against the format.
#include <hdf5.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>

#include "io/checkpoint_format.hpp"
#include "io/h5.hpp"
#include "src/base/error.hpp"

namespace fs = std::filesystem;

namespace ht {
namespace {

std::string read_string_attr(hid_t loc, const char* name) {
  H5Handle a(h5(H5Aopen(loc, name, H5P_DEFAULT), std::string("attribute ") + name + " missing"), H5Aclose);
  H5Handle ftype(h5(H5Aget_type(a), "H5Aget_type"), H5Tclose);
  if (H5Tget_class(ftype) != H5T_STRING) throw H5Fail(std::string("attribute ") + name + " is not a string");
  if (H5Tis_variable_str(ftype) > 0) throw H5Fail(std::string("attribute ") + name + " is a variable-length string");
  size_t n = H5Tget_size(ftype);
  std::string buf(n, '\0');
  H5Handle mtype(h5(H5Tcopy(H5T_C_S1), "H5Tcopy"), H5Tclose);
  h5(H5Tset_size(mtype, n), "H5Tset_size");
  h5(H5Tset_strpad(mtype, H5T_STR_NULLPAD), "H5Tset_strpad");
  h5(H5Aread(a, mtype, buf.data()), std::string("read attribute ") + name);
  buf.resize(strnlen(buf.c_str(), n));
  return buf;
}

int64_t read_int_attr(hid_t loc, const char* name) {
  H5Handle a(h5(H5Aopen(loc, name, H5P_DEFAULT), std::string("attribute ") + name + " missing"), H5Aclose);
  int64_t v = 0;
  h5(H5Aread(a, H5T_NATIVE_INT64, &v), std::string("read attribute ") + name);
  return v;
}

bool has_fletcher32(hid_t ds) {
  H5Handle dcpl(h5(H5Dget_create_plist(ds), "H5Dget_create_plist"), H5Pclose);
  int n = H5Pget_nfilters(dcpl);
  for (int i = 0; i < n; ++i) {
    unsigned flags = 0, cd[8];
    size_t ncd = 8;
    char fname[64];
    unsigned config = 0;
    if (H5Pget_filter2(dcpl, static_cast<unsigned>(i), &flags, &ncd, cd, sizeof fname, fname, &config) ==
        H5Z_FILTER_FLETCHER32)
      return true;
  }
  return false;
}

// Opens a dataset and checks its element class/size and that it carries a fletcher32 checksum.
H5Handle open_checked(hid_t f, const std::string& name, H5T_class_t cls, size_t size, std::vector<hsize_t>* dims) {
  if (H5Lexists(f, name.c_str(), H5P_DEFAULT) <= 0) throw H5Fail("dataset /" + name + " is missing");
  H5Handle ds(h5(H5Dopen2(f, name.c_str(), H5P_DEFAULT), "open dataset /" + name), H5Dclose);
  H5Handle type(h5(H5Dget_type(ds), "H5Dget_type /" + name), H5Tclose);
  if (H5Tget_class(type) != cls || H5Tget_size(type) != size)
    throw H5Fail("dataset /" + name + " has the wrong element type");
  if (!has_fletcher32(ds)) throw H5Fail("dataset /" + name + " has no fletcher32 checksum");
  H5Handle space(h5(H5Dget_space(ds), "H5Dget_space /" + name), H5Sclose);
  int nd = h5(H5Sget_simple_extent_ndims(space), "ndims /" + name);
  dims->assign(static_cast<size_t>(nd), 0);
  h5(H5Sget_simple_extent_dims(space, dims->data(), nullptr), "dims /" + name);
  return ds;
}

std::string read_text(hid_t f, const std::string& name) {
  std::vector<hsize_t> dims;
  H5Handle ds = open_checked(f, name, H5T_INTEGER, 1, &dims);
  if (dims.size() != 1) throw H5Fail("dataset /" + name + " is not 1-d");
  std::string s(dims[0], '\0');
  if (!s.empty()) h5(H5Dread(ds, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, s.data()), "read /" + name + " (checksum)");
  return s;
}

// Names of the members of group `g` (absent group: empty).
std::vector<std::string> group_members(hid_t f, const char* g) {
  std::vector<std::string> out;
  if (H5Lexists(f, g, H5P_DEFAULT) <= 0) return out;
  H5Handle grp(h5(H5Gopen2(f, g, H5P_DEFAULT), std::string("open group /") + g), H5Gclose);
  H5G_info_t info;
  h5(H5Gget_info(grp, &info), "H5Gget_info");
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    ssize_t n = h5(H5Lget_name_by_idx(grp, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT), "link name");
    std::string name(static_cast<size_t>(n) + 1, '\0');
    h5(H5Lget_name_by_idx(grp, ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(), H5P_DEFAULT), "link name");
    name.resize(static_cast<size_t>(n));
    out.push_back(name);
  }
  return out;
}

// Reads every member of group `g` (8-byte elements of class `cls`, shape [1]) into out[key].
template <class T>
void read_scalars(hid_t f, const std::string& g, H5T_class_t cls, hid_t native, std::map<std::string, T>& out) {
  static_assert(sizeof(T) == 8);
  for (auto& key : group_members(f, g.c_str())) {
    const std::string name = g + "/" + key;
    std::vector<hsize_t> dims;
    H5Handle ds = open_checked(f, name, cls, 8, &dims);
    if (dims != std::vector<hsize_t>{1}) throw H5Fail("dataset /" + name + " is not [1]");
    T v = 0;
    h5(H5Dread(ds, native, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v), "read /" + name + " (checksum)");
    out[key] = v;
  }
}

H5Handle open_file(const std::string& path) {
  H5Handle fapl(h5(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate"), H5Pclose);
  h5(H5Pset_file_locking(fapl, false, true), "H5Pset_file_locking");
  return H5Handle(h5(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl), "open as HDF5"), H5Fclose);
}

CheckpointData read_file_impl(const std::string& path) {
  if (!fs::is_regular_file(path)) throw H5Fail("no such file");
  H5Handle f = open_file(path);
  std::string format = read_string_attr(f, "format");
  if (format != kCheckpointFormat) throw H5Fail("root attribute format = '" + format + "', expected '" + kCheckpointFormat + "'");
  int64_t version = read_int_attr(f, "version");
  if (version < kCheckpointMinVersion || version > kCheckpointVersion)
    throw H5Fail("root attribute version = " + std::to_string(version) + ", this build reads versions " +
                 std::to_string(kCheckpointMinVersion) + " to " + std::to_string(kCheckpointVersion));
  CheckpointData d;
  d.version = static_cast<int>(version);
  std::string index = read_text(f, "meta/tensor_names");
  std::istringstream is(index);
  std::string name;
  while (std::getline(is, name)) {
    if (name.empty()) continue;
    std::vector<hsize_t> dims;
    H5Handle ds = open_checked(f, name, H5T_FLOAT, 4, &dims);
    bool scalar = H5Aexists(ds, "scalar") > 0;
    std::vector<int64_t> shape(dims.begin(), dims.end());
    if (scalar) {
      if (shape != std::vector<int64_t>{1}) throw H5Fail("dataset /" + name + " marked scalar but has more elements");
      shape.clear();
    }
    Tensor t = Tensor::empty(shape, DType::f32, Device::cpu);
    if (t.numel() > 0)
      h5(H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.raw()), "read /" + name + " (checksum)");
    d.tensors.emplace_back(name, std::move(t));
  }
  read_scalars(f, "ints", H5T_INTEGER, H5T_NATIVE_INT64, d.ints);
  read_scalars(f, "floats", H5T_FLOAT, H5T_NATIVE_DOUBLE, d.floats);
  for (auto& key : group_members(f, "strings")) d.strings[key] = read_text(f, "strings/" + key);
  if (!d.ints.count("step")) throw H5Fail("dataset /ints/step is missing");
  if (std::string problem = rank_buffer_problem(d, version); !problem.empty()) throw H5Fail(problem);
  f.close_checked("close");
  return d;
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string o = "[";
  for (size_t i = 0; i < s.size(); ++i) o += (i ? ", " : "") + std::to_string(s[i]);
  return o + "]";
}

}  // namespace

std::string rank_buffer_name(int64_t rank, const std::string& buffer_name) {
  return std::string(kRankBufferGroup) + "/" + std::to_string(rank) + "/" + buffer_name;
}

bool is_rank_buffer_name(const std::string& n) {
  const std::string g = std::string(kRankBufferGroup) + "/";
  return n.compare(0, g.size(), g) == 0;
}

int checkpoint_version_for(const CheckpointData& d) {
  for (const auto& [n, t] : d.tensors)
    if (is_rank_buffer_name(n)) return 2;
  return 1;
}

std::string rank_buffer_problem(const CheckpointData& d, int64_t version) {
  std::map<std::string, std::vector<int64_t>> buffers;  // buffer name -> shape
  std::map<int64_t, std::map<std::string, std::vector<int64_t>>> ranks;
  std::string first;  // the first per-rank buffer, for messages
  const std::string g = std::string(kRankBufferGroup) + "/";
  for (const auto& [n, t] : d.tensors) {
    if (n.rfind("buffer/", 0) == 0) buffers[n.substr(7)] = t.shape();
    if (!is_rank_buffer_name(n)) continue;
    if (first.empty()) first = n;
    const size_t slash = n.find('/', g.size());
    const std::string r = n.substr(g.size(), slash == std::string::npos ? std::string::npos : slash - g.size());
    const bool digits = !r.empty() && r.size() <= 9 && r.find_first_not_of("0123456789") == std::string::npos &&
                        (r == "0" || r[0] != '0');
    if (slash == std::string::npos || slash + 1 == n.size() || !digits)
      return "dataset /" + n + " is not named " + g + "<rank>/<buffer name>";
    ranks[std::stoll(r)][n.substr(slash + 1)] = t.shape();
  }
  if (version < 2) return first.empty() ? "" : "dataset /" + first + " in a version " + std::to_string(version) +
                                                   " file (per-rank buffers are version 2)";
  if (first.empty()) return "version 2 file without per-rank buffers (/" + g + "<rank>/...)";
  auto ws = d.ints.find("world_size");
  if (ws == d.ints.end()) return "dataset /ints/world_size is missing (a version 2 file needs it)";
  if (ws->second < 2) return "ints/world_size = " + std::to_string(ws->second) + " with per-rank buffers";
  for (const auto& [rank, names] : ranks) {
    if (rank >= ws->second)
      return "dataset /" + rank_buffer_name(rank, names.begin()->first) + ": rank " + std::to_string(rank) +
             " is outside world_size " + std::to_string(ws->second);
    for (const auto& [name, shape] : names) {
      auto b = buffers.find(name);
      if (b == buffers.end()) return "dataset /" + rank_buffer_name(rank, name) + " has no /buffer/" + name;
      if (b->second != shape)
        return "dataset /" + rank_buffer_name(rank, name) + " has shape " + shape_text(shape) + ", /buffer/" + name +
               " has " + shape_text(b->second);
    }
    for (const auto& [name, shape] : buffers)
      if (!names.count(name)) return "dataset /" + rank_buffer_name(rank, name) + " is missing";
  }
  if (static_cast<int64_t>(ranks.size()) != ws->second) {
    int64_t missing = 0;
    while (ranks.count(missing)) ++missing;
    return "group /" + g + std::to_string(missing) + " is missing (world_size " + std::to_string(ws->second) +
           " needs ranks 0 to " + std::to_string(ws->second - 1) + ")";
  }
  return "";
}

const Tensor* CheckpointData::find(const std::string& name) const {
  for (auto& [n, t] : tensors)
    if (n == name) return &t;
  return nullptr;
}

size_t CheckpointData::payload_bytes() const {
  size_t b = 0;
  for (auto& [n, t] : tensors) b += static_cast<size_t>(t.numel()) * 4;
  return b;
}

int64_t CheckpointData::get_int(const std::string& key, const std::string& origin) const {
  auto it = ints.find(key);
  if (it == ints.end()) throw UsageError(origin + ": field ints/" + key + " is missing");
  return it->second;
}

CheckpointData read_checkpoint_file(const std::string& path) {
  H5Section section;
  try {
    return read_file_impl(path);
  } catch (const H5Fail& e) {
    throw UsageError("checkpoint " + path + " is invalid: " + e.what());
  } catch (const RuntimeError& e) {
    throw UsageError("checkpoint " + path + " is invalid: " + e.what());
  }
}

bool is_checkpoint_file(const std::string& path) {
  H5Section section;
  try {
    if (H5Fis_hdf5(path.c_str()) <= 0) return false;
    H5Handle f = open_file(path);
    return read_string_attr(f, "format") == kCheckpointFormat;
  } catch (...) {
    return false;
  }
}

}  // namespace ht
