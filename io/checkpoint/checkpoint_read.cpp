// The checkpoint reader (io/checkpoint/checkpoint_format.hpp): every dataset's metadata is checked before anything
// it declares is allocated (types, ranks, 64-bit sizes, stored bytes against the declared ones and the
// file size), the layout is validated (io/checkpoint/checkpoint_validate.cpp, and the caller's check), then every
// dataset is read back, so HDF5 verifies every fletcher32 checksum.
#include <hdf5.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string_view>

#include "io/checkpoint/checkpoint_format.hpp"
#include "io/h5.hpp"
#include "base/error.hpp"

namespace fs = std::filesystem;

namespace ht {
namespace {

std::string read_string_attr(hid_t loc, const char* name) {
  H5Handle a(h5(H5Aopen(loc, name, H5P_DEFAULT), std::string("attribute ") + name + " missing"), H5Aclose);
  H5Handle ftype(h5(H5Aget_type(a), "H5Aget_type"), H5Tclose);
  if (H5Tget_class(ftype) != H5T_STRING) throw H5Fail(std::string("attribute ") + name + " is not a string");
  if (H5Tis_variable_str(ftype) > 0) throw H5Fail(std::string("attribute ") + name + " is a variable-length string");
  H5Handle space(h5(H5Aget_space(a), "H5Aget_space"), H5Sclose);
  if (H5Sget_simple_extent_npoints(space) != 1) throw H5Fail(std::string("attribute ") + name + " is not one string");
  size_t n = H5Tget_size(ftype);
  if (n == 0 || n > 4096) throw H5Fail(std::string("attribute ") + name + " declares a string of " + std::to_string(n) + " bytes");
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
  H5Handle type(h5(H5Aget_type(a), "H5Aget_type"), H5Tclose);
  H5Handle space(h5(H5Aget_space(a), "H5Aget_space"), H5Sclose);
  if (H5Tget_class(type) != H5T_INTEGER || H5Sget_simple_extent_npoints(space) != 1)
    throw H5Fail(std::string("attribute ") + name + " is not one integer");
  int64_t v = 0;
  h5(H5Aread(a, H5T_NATIVE_INT64, &v), std::string("read attribute ") + name);
  return v;
}

// What a dataset must hold: its element type and, for scalars and text, its rank.
enum class Kind { tensor, int64, float64, text };

const char* kind_text(Kind k) {
  switch (k) {
    case Kind::tensor: return "IEEE float32";
    case Kind::int64: return "int64";
    case Kind::float64: return "IEEE float64";
    case Kind::text: return "uint8";
  }
  return "?";
}

bool type_ok(hid_t type, Kind k) {
  auto eq = [&](hid_t a, hid_t b) { return H5Tequal(type, a) > 0 || H5Tequal(type, b) > 0; };
  switch (k) {
    case Kind::tensor: return eq(H5T_IEEE_F32LE, H5T_IEEE_F32BE);
    case Kind::int64: return eq(H5T_STD_I64LE, H5T_STD_I64BE);
    case Kind::float64: return eq(H5T_IEEE_F64LE, H5T_IEEE_F64BE);
    case Kind::text: return eq(H5T_STD_U8LE, H5T_STD_U8BE);
  }
  return false;
}

std::string dims_text(const std::vector<hsize_t>& s) {
  std::string o = "[";
  for (size_t i = 0; i < s.size(); ++i) o += (i ? ", " : "") + std::to_string(s[i]);
  return o + "]";
}

// a x b for untrusted sizes; false on overflow past `limit`.
bool mul_within(uint64_t a, uint64_t b, uint64_t limit, uint64_t* r) {
  return !__builtin_mul_overflow(a, b, r) && *r <= limit;
}

// The filters of `dcpl` must be exactly one: fletcher32 (what the writer uses: the stored size of
// every chunk is then its raw size plus a 4-byte checksum, which the storage check relies on).
void check_filters(hid_t dcpl, const std::string& name) {
  const int n = h5(H5Pget_nfilters(dcpl), "filters of /" + name);
  bool fletcher = false;
  for (int i = 0; i < n; ++i) {
    unsigned flags = 0, cd[8];
    size_t ncd = 8;
    char fname[64] = {0};
    unsigned config = 0;
    const H5Z_filter_t id = H5Pget_filter2(dcpl, static_cast<unsigned>(i), &flags, &ncd, cd, sizeof fname, fname, &config);
    if (id == H5Z_FILTER_FLETCHER32) {
      fletcher = true;
      continue;
    }
    throw H5Fail("dataset /" + name + " has filter " + std::to_string(id) + (fname[0] ? std::string(" (") + fname + ")" : "") +
                 "; checkpoints use the fletcher32 filter only");
  }
  if (!fletcher) throw H5Fail("dataset /" + name + " has no fletcher32 checksum");
}

// An open, checked dataset and its dimensions.
struct Checked {
  H5Handle ds;
  std::vector<hsize_t> dims;
  uint64_t bytes = 0;  // declared size in memory
};

// Opens /name and checks, from metadata only, that it can be read without trusting any size it
// declares: element type, rank, element and byte counts (checked 64-bit), chunked layout with only
// fletcher32, and that its data is stored (allocated, every chunk present, stored bytes covering the
// declared size and within the file's `file_size`).
/// Each component of `name` ("param/conv1.weight": /param, then /param/conv1.weight) exists; throws
/// H5Fail saying the object is missing, or, when HDF5 cannot read a group's metadata on the way (its
/// checksum fails, the file is cut short), that the file is damaged there: not "missing".
void require_links(hid_t f, const std::string& name) {
  std::string parent;  // the group whose links the lookup reads ("" = the root group)
  for (size_t end = name.find('/');; end = name.find('/', end + 1)) {
    const std::string prefix = name.substr(0, end);
    const htri_t e = H5Lexists(f, prefix.c_str(), H5P_DEFAULT);
    if (e < 0)
      throw H5Fail("the file is damaged at /" + parent + ": HDF5 cannot read that group's metadata (a checksum " +
                   "mismatch or a truncated file), so /" + name + " cannot be reached");
    if (e == 0) throw H5Fail("dataset /" + name + " is missing");
    if (end == std::string::npos) return;
    parent = prefix;
  }
}

Checked open_checked(hid_t f, const std::string& name, Kind kind, uint64_t file_size) {
  require_links(f, name);
  H5O_info_t oi;
  h5(H5Oget_info_by_name(f, name.c_str(), &oi, H5P_DEFAULT), "object /" + name);
  if (oi.type != H5O_TYPE_DATASET) throw H5Fail("/" + name + " is not a dataset");
  Checked c;
  c.ds = H5Handle(h5(H5Dopen2(f, name.c_str(), H5P_DEFAULT), "open dataset /" + name), H5Dclose);
  {
    H5Handle type(h5(H5Dget_type(c.ds), "H5Dget_type /" + name), H5Tclose);
    if (!type_ok(type, kind))
      throw H5Fail("dataset /" + name + " has the wrong element type (class " + std::to_string(H5Tget_class(type)) +
                   ", " + std::to_string(H5Tget_size(type)) + " bytes; expected " + kind_text(kind) + ")");
  }
  H5Handle space(h5(H5Dget_space(c.ds), "H5Dget_space /" + name), H5Sclose);
  if (H5Sget_simple_extent_type(space) != H5S_SIMPLE) throw H5Fail("dataset /" + name + " has no simple dataspace");
  const int nd = h5(H5Sget_simple_extent_ndims(space), "ndims /" + name);
  if (nd < 1 || nd > kCheckpointMaxRank)
    throw H5Fail("dataset /" + name + " has " + std::to_string(nd) + " dimensions (1 to " +
                 std::to_string(kCheckpointMaxRank) + " allowed)");
  c.dims.assign(static_cast<size_t>(nd), 0);
  h5(H5Sget_simple_extent_dims(space, c.dims.data(), nullptr), "dims /" + name);
  if ((kind == Kind::int64 || kind == Kind::float64) && c.dims != std::vector<hsize_t>{1})
    throw H5Fail("dataset /" + name + " has shape " + dims_text(c.dims) + ", expected [1]");
  if (kind == Kind::text && nd != 1) throw H5Fail("dataset /" + name + " is not 1-d (shape " + dims_text(c.dims) + ")");
  const uint64_t esize = kind == Kind::tensor ? 4 : kind == Kind::text ? 1 : 8;
  uint64_t elems = 1;
  for (hsize_t d : c.dims)
    if (!mul_within(elems, d, kCheckpointMaxDatasetBytes / esize, &elems))
      throw H5Fail("dataset /" + name + " has shape " + dims_text(c.dims) + ": more than " +
                   std::to_string(kCheckpointMaxDatasetBytes) + " bytes (element count overflows the limit)");
  c.bytes = elems * esize;
  H5Handle dcpl(h5(H5Dget_create_plist(c.ds), "H5Dget_create_plist /" + name), H5Pclose);
  if (H5Pget_layout(dcpl) != H5D_CHUNKED) throw H5Fail("dataset /" + name + " is not chunked");
  check_filters(dcpl, name);
  if (H5Pget_external_count(dcpl) != 0) throw H5Fail("dataset /" + name + " uses external storage");
  if (elems == 0) return c;  // nothing stored, nothing to read
  std::vector<hsize_t> chunk(static_cast<size_t>(nd), 0);
  if (h5(H5Pget_chunk(dcpl, nd, chunk.data()), "chunk dims /" + name) != nd)
    throw H5Fail("dataset /" + name + ": chunk rank differs from the dataset's");
  uint64_t chunk_elems = 1, nchunks = 1;
  for (int i = 0; i < nd; ++i) {
    if (chunk[i] == 0) throw H5Fail("dataset /" + name + " has a chunk dimension 0");
    const uint64_t along = (c.dims[i] + chunk[i] - 1) / chunk[i];
    if (!mul_within(chunk_elems, chunk[i], kCheckpointMaxDatasetBytes / esize, &chunk_elems) ||
        !mul_within(nchunks, along, kCheckpointMaxDatasetBytes, &nchunks))
      throw H5Fail("dataset /" + name + " has chunks " + dims_text(chunk) + " beyond the size limit");
  }
  // (HDF5 reports a filtered chunked dataset as "partly allocated" even when complete: its stored
  // size differs from the raw size. The chunk count and the stored bytes below decide.)
  H5D_space_status_t status;
  h5(H5Dget_space_status(c.ds, &status), "allocation status /" + name);
  if (status == H5D_SPACE_STATUS_NOT_ALLOCATED)
    throw H5Fail("dataset /" + name + " of shape " + dims_text(c.dims) +
                 " has no stored data (a dataset without data is invalid)");
  hsize_t stored_chunks = 0;
  h5(H5Dget_num_chunks(c.ds, space, &stored_chunks), "chunk count /" + name);
  if (stored_chunks != nchunks)
    throw H5Fail("dataset /" + name + " of shape " + dims_text(c.dims) + " in chunks " + dims_text(chunk) + " has " +
                 std::to_string(stored_chunks) + " chunks stored, expected " + std::to_string(nchunks) + " (a dataset without all its data is invalid)");
  const uint64_t stored = H5Dget_storage_size(c.ds);
  uint64_t need = 0;  // every chunk stored whole (edge chunks padded), each with its 4-byte checksum
  if (!mul_within(nchunks, chunk_elems * esize + 4, UINT64_MAX, &need) || stored < need || stored > file_size)
    throw H5Fail("dataset /" + name + " of shape " + dims_text(c.dims) + " declares " + std::to_string(c.bytes) +
                 " bytes (" + std::to_string(nchunks) + " chunks of " + std::to_string(chunk_elems * esize) +
                 " bytes) but " + std::to_string(stored) + " bytes are stored, in a file of " +
                 std::to_string(file_size) + " bytes");
  return c;
}

std::string read_text(hid_t f, const std::string& name, uint64_t file_size) {
  Checked c = open_checked(f, name, Kind::text, file_size);
  std::string s(static_cast<size_t>(c.bytes), '\0');
  if (!s.empty()) h5(H5Dread(c.ds, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, s.data()), "read /" + name + " (checksum)");
  return s;
}

// Names of the members of group `g` (absent group: empty).
std::vector<std::string> group_members(hid_t f, const char* g) {
  std::vector<std::string> out;
  if (H5Lexists(f, g, H5P_DEFAULT) <= 0) return out;
  const hid_t opened = H5Gopen2(f, g, H5P_DEFAULT);
  if (opened < 0)
    throw H5Fail(std::string("the file is damaged at /") + g +
                 ": HDF5 cannot read the group's metadata (a checksum mismatch or a truncated file)");
  H5Handle grp(opened, H5Gclose);
  H5G_info_t info;
  h5(H5Gget_info(grp, &info), "H5Gget_info");
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    ssize_t n = h5(H5Lget_name_by_idx(grp, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT), "link name");
    if (n <= 0 || n > 4096) throw H5Fail(std::string("group /") + g + " has a member name of " + std::to_string(n) + " bytes");
    std::string name(static_cast<size_t>(n) + 1, '\0');
    h5(H5Lget_name_by_idx(grp, ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(), H5P_DEFAULT), "link name");
    name.resize(static_cast<size_t>(n));
    out.push_back(name);
  }
  return out;
}

// Reads every member of group `g` (int64 or float64 scalars, shape [1]) into out[key].
template <class T>
void read_scalars(hid_t f, const std::string& g, Kind kind, hid_t native, uint64_t file_size,
                  std::map<std::string, T>& out) {
  static_assert(sizeof(T) == 8);
  for (auto& key : group_members(f, g.c_str())) {
    const std::string name = g + "/" + key;
    Checked c = open_checked(f, name, kind, file_size);
    T v = 0;
    h5(H5Dread(c.ds, native, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v), "read /" + name + " (checksum)");
    out[key] = v;
  }
}

H5Handle open_file(const std::string& path) {
  H5Handle fapl(h5(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate"), H5Pclose);
  h5(H5Pset_file_locking(fapl, false, true), "H5Pset_file_locking");
  return H5Handle(h5(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl), "open as HDF5"), H5Fclose);
}

// The values of a tensor just read: every one finite (training skips a step with a non-finite loss
// or gradient, so no saved state holds one), and running variances >= 0. "" when valid.
std::string values_problem(const std::string& name, const Tensor& t) {
  const float* v = static_cast<const float*>(t.raw());
  const int64_t n = t.numel();
  const bool variance = name.size() >= 12 && name.compare(name.size() - 12, 12, ".running_var") == 0;
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(v[i]) || (variance && v[i] < 0))
      return "dataset /" + name + " element " + std::to_string(i) + " = " + std::to_string(v[i]) +
             (variance ? " (a running variance must be finite and >= 0)" : " (not finite)");
  return "";
}

CheckpointData read_file_impl(const std::string& path, const CheckpointCheck& check) {
  if (!fs::is_regular_file(path)) throw H5Fail("no such file");
  const uint64_t file_size = fs::file_size(path);
  H5Handle f = open_file(path);
  std::string format = read_string_attr(f, "format");
  if (format != kCheckpointFormat) throw H5Fail("root attribute format = '" + format + "', expected '" + kCheckpointFormat + "'");
  int64_t version = read_int_attr(f, "version");
  if (version < kCheckpointMinVersion || version > kCheckpointVersion)
    throw H5Fail("root attribute version = " + std::to_string(version) + ", this build reads versions " +
                 std::to_string(kCheckpointMinVersion) + " to " + std::to_string(kCheckpointVersion));
  // 1. Everything but the tensor data: the index, each tensor's metadata, the scalars and strings.
  CheckpointLayout layout;
  layout.version = static_cast<int>(version);
  std::vector<Checked> opened;
  std::istringstream is(read_text(f, "meta/tensor_names", file_size));
  std::string name;
  while (std::getline(is, name)) {
    if (name.empty()) continue;
    if (name.front() == '/' || name.find('\0') != std::string::npos)
      throw H5Fail("/meta/tensor_names lists a malformed name '" + name.substr(0, 200) + "'");
    Checked c = open_checked(f, name, Kind::tensor, file_size);
    std::vector<int64_t> shape(c.dims.begin(), c.dims.end());
    if (H5Aexists(c.ds, "scalar") > 0) {
      if (shape != std::vector<int64_t>{1}) throw H5Fail("dataset /" + name + " marked scalar but has shape " + dims_text(c.dims));
      shape.clear();
    }
    layout.tensors.push_back({name, std::move(shape)});
    opened.push_back(std::move(c));
  }
  read_scalars(f, "ints", Kind::int64, H5T_NATIVE_INT64, file_size, layout.ints);
  read_scalars(f, "floats", Kind::float64, H5T_NATIVE_DOUBLE, file_size, layout.floats);
  for (auto& key : group_members(f, "strings")) layout.strings[key] = read_text(f, "strings/" + key, file_size);
  // 2. The shared validation, then the caller's (model, run), before any tensor is allocated.
  if (std::string problem = checkpoint_layout_problem(layout, path); !problem.empty()) throw H5Fail(problem);
  if (check)
    if (std::string problem = check(layout, path); !problem.empty()) throw H5Fail(problem);
  // 3. The tensor data (every chunk's fletcher32 verified by HDF5).
  CheckpointData d;
  d.version = layout.version;
  for (size_t i = 0; i < opened.size(); ++i) {
    Tensor t = Tensor::empty(layout.tensors[i].shape, DType::f32, Device::cpu);
    if (t.numel() > 0)
      h5(H5Dread(opened[i].ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.raw()),
         "read /" + layout.tensors[i].name + " (checksum)");
    opened[i].ds.reset();
    if (std::string problem = values_problem(layout.tensors[i].name, t); !problem.empty()) throw H5Fail(problem);
    d.tensors.emplace_back(std::move(layout.tensors[i].name), std::move(t));
  }
  d.ints = std::move(layout.ints);
  d.floats = std::move(layout.floats);
  d.strings = std::move(layout.strings);
  f.close_checked("close");
  return d;
}

}  // namespace

namespace {
constexpr std::pair<StateGroup, std::string_view> kStateGroups[] = {
    {StateGroup::param, "param/"}, {StateGroup::buffer, "buffer/"}, {StateGroup::momentum, "momentum/"}};
}  // namespace

std::string state_tensor_name(StateGroup group, const std::string& name) {
  for (const auto& [g, prefix] : kStateGroups)
    if (g == group) return std::string(prefix) + name;
  throw std::logic_error("state_tensor_name: unknown group");
}

bool parse_state_tensor_name(const std::string& tensor_name, StateGroup* group, std::string* name) {
  for (const auto& [g, prefix] : kStateGroups)
    if (tensor_name.size() > prefix.size() && tensor_name.compare(0, prefix.size(), prefix) == 0) {
      if (group) *group = g;
      if (name) *name = tensor_name.substr(prefix.size());
      return true;
    }
  return false;
}

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

CheckpointData read_checkpoint_file(const std::string& path, const CheckpointCheck& check) {
  H5Section section;
  try {
    return read_file_impl(path, check);
  } catch (const CheckpointRefusal&) {
    throw;
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
