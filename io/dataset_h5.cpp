// HDF5 dataset shards: writer, validating reader, attribute helpers (HDF5 C API, 1.10).
#include "io/dataset_h5.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <cstdlib>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <regex>
#include <sstream>

#include "io/h5_check.hpp"

namespace fs = std::filesystem;

namespace ht {

std::recursive_mutex& hdf5_mutex() {
  static std::recursive_mutex m;
  return m;
}

std::string shard_file_name(const std::string& split, int index, int num_shards) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "-%05d-of-%05d.h5", index, num_shards);
  return split + buf;
}

int64_t samples_per_chunk(int64_t sample_bytes) {
  return std::max<int64_t>(1, (64 * 1024) / std::max<int64_t>(1, sample_bytes));
}

H5QuietErrors::H5QuietErrors() {
  H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}
H5QuietErrors::~H5QuietErrors() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }

// ---- attribute helpers ----------------------------------------------------------------------

namespace {

H5Handle vlen_str_type() {
  hid_t t = HT_H5_CHECK(H5Tcopy(H5T_C_S1));
  HT_H5_CHECK(H5Tset_size(t, H5T_VARIABLE));
  HT_H5_CHECK(H5Tset_cset(t, H5T_CSET_UTF8));
  return H5Handle(t, H5Tclose);
}

void write_attr_string(hid_t obj, const char* name, const std::string& v) {
  H5Handle type = vlen_str_type();
  H5Handle space(HT_H5_CHECK(H5Screate(H5S_SCALAR)), H5Sclose);
  H5Handle a(HT_H5_CHECK(H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT)), H5Aclose);
  const char* p = v.c_str();
  HT_H5_CHECK(H5Awrite(a, type, &p));
}

void write_attr_strings(hid_t obj, const char* name, const std::vector<std::string>& v) {
  H5Handle type = vlen_str_type();
  hsize_t n = v.size();
  H5Handle space(HT_H5_CHECK(H5Screate_simple(1, &n, nullptr)), H5Sclose);
  H5Handle a(HT_H5_CHECK(H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT)), H5Aclose);
  std::vector<const char*> ptrs;
  for (auto& s : v) ptrs.push_back(s.c_str());
  HT_H5_CHECK(H5Awrite(a, type, ptrs.data()));
}

void write_attr_int(hid_t obj, const char* name, int64_t v) {
  H5Handle space(HT_H5_CHECK(H5Screate(H5S_SCALAR)), H5Sclose);
  H5Handle a(HT_H5_CHECK(H5Acreate2(obj, name, H5T_STD_I32LE, space, H5P_DEFAULT, H5P_DEFAULT)), H5Aclose);
  int32_t x = static_cast<int32_t>(v);
  HT_H5_CHECK(H5Awrite(a, H5T_NATIVE_INT32, &x));
}

void write_attr_floats(hid_t obj, const char* name, const std::vector<float>& v) {
  hsize_t n = v.size();
  H5Handle space(HT_H5_CHECK(H5Screate_simple(1, &n, nullptr)), H5Sclose);
  H5Handle a(HT_H5_CHECK(H5Acreate2(obj, name, H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT)), H5Aclose);
  HT_H5_CHECK(H5Awrite(a, H5T_NATIVE_FLOAT, v.data()));
}

// Reads a string-typed attribute (fixed or variable length, scalar or 1-D) into `out`.
bool read_attr_string_array(hid_t obj, const char* name, std::vector<std::string>& out) {
  if (H5Aexists(obj, name) <= 0) return false;
  H5Handle a(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  if (!a.valid()) return false;
  H5Handle ftype(H5Aget_type(a), H5Tclose);
  if (H5Tget_class(ftype) != H5T_STRING) return false;
  H5Handle space(H5Aget_space(a), H5Sclose);
  hssize_t n = H5Sget_simple_extent_npoints(space);
  if (n < 0) return false;
  out.clear();
  if (H5Tis_variable_str(ftype) > 0) {
    H5Handle mtype = vlen_str_type();
    std::vector<char*> ptrs(static_cast<size_t>(n), nullptr);
    if (H5Aread(a, mtype, ptrs.data()) < 0) return false;
    for (char* p : ptrs) out.emplace_back(p ? p : "");
    H5Dvlen_reclaim(mtype, space, H5P_DEFAULT, ptrs.data());
  } else {
    size_t len = H5Tget_size(ftype);
    H5Handle mtype(H5Tcopy(ftype), H5Tclose);
    std::vector<char> buf(len * static_cast<size_t>(n) + 1, 0);
    if (H5Aread(a, mtype, buf.data()) < 0) return false;
    for (hssize_t i = 0; i < n; ++i) {
      const char* p = buf.data() + static_cast<size_t>(i) * len;
      out.emplace_back(p, strnlen(p, len));
    }
  }
  return true;
}

}  // namespace

bool h5_attr_exists(hid_t obj, const char* name) { return H5Aexists(obj, name) > 0; }

bool h5_read_attr_string(hid_t obj, const char* name, std::string& out) {
  std::vector<std::string> v;
  if (!read_attr_string_array(obj, name, v) || v.size() != 1) return false;
  out = v[0];
  return true;
}

bool h5_read_attr_strings(hid_t obj, const char* name, std::vector<std::string>& out) {
  return read_attr_string_array(obj, name, out);
}

bool h5_read_attr_int(hid_t obj, const char* name, int64_t& out) {
  if (H5Aexists(obj, name) <= 0) return false;
  H5Handle a(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  if (!a.valid()) return false;
  H5Handle ftype(H5Aget_type(a), H5Tclose);
  if (H5Tget_class(ftype) != H5T_INTEGER) return false;
  H5Handle space(H5Aget_space(a), H5Sclose);
  if (H5Sget_simple_extent_npoints(space) != 1) return false;
  long long v = 0;
  if (H5Aread(a, H5T_NATIVE_LLONG, &v) < 0) return false;
  out = v;
  return true;
}

bool h5_read_attr_floats(hid_t obj, const char* name, std::vector<float>& out) {
  if (H5Aexists(obj, name) <= 0) return false;
  H5Handle a(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  if (!a.valid()) return false;
  H5Handle ftype(H5Aget_type(a), H5Tclose);
  if (H5Tget_class(ftype) != H5T_FLOAT) return false;
  H5Handle space(H5Aget_space(a), H5Sclose);
  hssize_t n = H5Sget_simple_extent_npoints(space);
  if (n < 0) return false;
  out.assign(static_cast<size_t>(n), 0.f);
  return H5Aread(a, H5T_NATIVE_FLOAT, out.data()) >= 0;
}

// ---- writer ---------------------------------------------------------------------------------

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

void write_dataset_shard(const std::string& path, const DatasetInfo& info, const std::string& split, int shard_index,
                         int num_shards, std::span<const uint8_t> images, std::span<const int32_t> labels,
                         int gzip_level) {
  const int64_t n = static_cast<int64_t>(labels.size());
  const int64_t sample = static_cast<int64_t>(info.height) * info.width * info.channels;
  if (sample <= 0 || static_cast<int64_t>(images.size()) != n * sample)
    throw UsageError(path + ": " + std::to_string(images.size()) + " image bytes for " + std::to_string(n) +
                     " labels of " + std::to_string(info.height) + "x" + std::to_string(info.width) + "x" +
                     std::to_string(info.channels));
  if (static_cast<int>(info.class_names.size()) != info.num_classes || static_cast<int>(info.mean.size()) != info.channels ||
      static_cast<int>(info.std.size()) != info.channels)
    throw UsageError(path + ": class_names/mean/std sizes do not match num_classes/channels");
  std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
  const std::string tmp = path + ".tmp";
  {
    H5Handle file(HT_H5_CHECK(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT)), H5Fclose);
    // /images uint8 [n,H,W,C], chunks of whole samples.
    hsize_t dims[4] = {static_cast<hsize_t>(n), static_cast<hsize_t>(info.height), static_cast<hsize_t>(info.width),
                       static_cast<hsize_t>(info.channels)};
    hsize_t chunk[4] = {static_cast<hsize_t>(std::max<int64_t>(1, std::min(n, samples_per_chunk(sample)))), dims[1],
                        dims[2], dims[3]};
    H5Handle space(HT_H5_CHECK(H5Screate_simple(4, dims, nullptr)), H5Sclose);
    H5Handle dcpl(HT_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)), H5Pclose);
    if (n > 0) {
      HT_H5_CHECK(H5Pset_chunk(dcpl, 4, chunk));
      if (gzip_level > 0) HT_H5_CHECK(H5Pset_deflate(dcpl, static_cast<unsigned>(gzip_level)));
    }
    H5Handle img(HT_H5_CHECK(H5Dcreate2(file, "images", H5T_STD_U8LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT)),
                 H5Dclose);
    if (n > 0) HT_H5_CHECK(H5Dwrite(img, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, images.data()));
    // /labels int32 [n]
    hsize_t ln = static_cast<hsize_t>(n);
    H5Handle lspace(HT_H5_CHECK(H5Screate_simple(1, &ln, nullptr)), H5Sclose);
    H5Handle lab(HT_H5_CHECK(H5Dcreate2(file, "labels", H5T_STD_I32LE, lspace, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)),
                 H5Dclose);
    if (n > 0) HT_H5_CHECK(H5Dwrite(lab, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, labels.data()));
    write_attr_string(file, "format", "hpctrain-dataset");
    write_attr_int(file, "version", 1);
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
    HT_H5_CHECK(H5Fflush(file, H5F_SCOPE_GLOBAL));
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

// ---- reader ---------------------------------------------------------------------------------

namespace {

// A POSIX descriptor closed on destruction.
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

struct Shard {
  std::string path;
  H5Handle file, images, fspace;
  int64_t count = 0, offset = 0;
  // Direct access: for uncompressed /images, the file address of every chunk (per_chunk samples
  // each; one "chunk" for a contiguous layout). Samples are then read with pread() (as fast as the
  // HDF5 chunk cache here, and thread-safe) without hdf5_mutex, so a checkpoint being written never
  // stalls the data pipeline. pread rather than mmap: a file truncated under a running job gives an
  // error message, not SIGBUS.
  Fd fd;
  int64_t per_chunk = 0;
  std::vector<uint64_t> chunk_addr;
};

// Fills the direct-access map of an uncompressed shard when the layout allows it; returns quietly
// (HDF5 reads are used) otherwise. Throws UsageError when a chunk lies beyond the end of the file.
void map_chunks(Shard& s, int64_t sample, int64_t file_size) {
  if (s.count == 0) return;
  H5Handle dcpl(H5Dget_create_plist(s.images), H5Pclose);
  if (!dcpl.valid() || H5Pget_nfilters(dcpl) != 0) return;
  H5Handle fcpl(H5Fget_create_plist(s.file), H5Pclose);
  hsize_t userblock = 0;
  if (!fcpl.valid() || H5Pget_userblock(fcpl, &userblock) < 0) return;
  std::vector<uint64_t> addr;
  int64_t per = 0;
  H5D_layout_t layout = H5Pget_layout(dcpl);
  if (layout == H5D_CONTIGUOUS) {
    haddr_t a = H5Dget_offset(s.images);
    if (a == HADDR_UNDEF) return;
    per = s.count;
    addr.push_back(static_cast<uint64_t>(a));
  } else if (layout == H5D_CHUNKED) {
    hsize_t cd[4];
    if (H5Pget_chunk(dcpl, 4, cd) != 4) return;
    hsize_t dims[4];
    H5Sget_simple_extent_dims(s.fspace, dims, nullptr);
    if (cd[1] != dims[1] || cd[2] != dims[2] || cd[3] != dims[3]) return;  // chunks must be whole samples
    per = static_cast<int64_t>(cd[0]);
    const int64_t expect = (s.count + per - 1) / per;
    hsize_t nchunks = 0;
    if (H5Dget_num_chunks(s.images, H5S_ALL, &nchunks) < 0 || static_cast<int64_t>(nchunks) != expect) return;
    addr.assign(static_cast<size_t>(expect), HADDR_UNDEF);
    for (hsize_t i = 0; i < nchunks; ++i) {
      hsize_t coord[4];
      unsigned mask = 0;
      haddr_t a = HADDR_UNDEF;
      hsize_t size = 0;
      if (H5Dget_chunk_info(s.images, H5S_ALL, i, coord, &mask, &a, &size) < 0) return;
      if (size != static_cast<hsize_t>(per * sample) || coord[0] % cd[0] != 0) return;
      addr[coord[0] / cd[0]] = static_cast<uint64_t>(a);
    }
  } else {
    return;
  }
  for (size_t c = 0; c < addr.size(); ++c) {
    if (addr[c] == HADDR_UNDEF) return;
    addr[c] += userblock;
    int64_t rows = std::min<int64_t>(per, s.count - static_cast<int64_t>(c) * per);
    if (static_cast<int64_t>(addr[c]) + rows * sample > file_size)
      throw UsageError(s.path + ": dataset /images chunk " + std::to_string(c) + " lies beyond the end of the file (" +
                       std::to_string(file_size) + " bytes; truncated file)");
  }
  int fd = ::open(s.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  s.fd.fd = fd;
  s.per_chunk = per;
  s.chunk_addr = std::move(addr);
}

// Reads rows [first, first+len) of a shard's /images into dst: pread() through the chunk map when
// there is one, else an HDF5 hyperslab read under hdf5_mutex().
void read_rows(Shard& s, int64_t first, int64_t len, size_t sample, const DatasetInfo& info, uint8_t* dst) {
  if (s.fd.fd >= 0) {
    int64_t r = first;
    while (r < first + len) {
      int64_t c = r / s.per_chunk;
      int64_t end = std::min(first + len, (c + 1) * s.per_chunk);
      size_t bytes = static_cast<size_t>(end - r) * sample;
      off_t off = static_cast<off_t>(s.chunk_addr[static_cast<size_t>(c)] + static_cast<uint64_t>(r - c * s.per_chunk) * sample);
      uint8_t* p = dst + static_cast<size_t>(r - first) * sample;
      size_t done = 0;
      while (done < bytes) {
        ssize_t got = ::pread(s.fd.fd, p + done, bytes - done, off + static_cast<off_t>(done));
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0)
          throw RuntimeError(s.path + ": reading /images rows " + std::to_string(r) + ".." + std::to_string(end - 1) +
                             " failed: " + (got < 0 ? std::string(std::strerror(errno)) : std::string("unexpected end of file")));
        done += static_cast<size_t>(got);
      }
      r = end;
    }
    return;
  }
  std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
  hsize_t start[4] = {static_cast<hsize_t>(first), 0, 0, 0};
  hsize_t cnt[4] = {static_cast<hsize_t>(len), static_cast<hsize_t>(info.height), static_cast<hsize_t>(info.width),
                    static_cast<hsize_t>(info.channels)};
  H5Handle ms(HT_H5_CHECK(H5Screate_simple(4, cnt, nullptr)), H5Sclose);
  HT_H5_CHECK(H5Sselect_hyperslab(s.fspace, H5S_SELECT_SET, start, nullptr, cnt, nullptr));
  if (H5Dread(s.images, H5T_NATIVE_UINT8, ms, s.fspace, H5P_DEFAULT, dst) < 0)
    throw RuntimeError(s.path + ": reading /images rows " + std::to_string(first) + ".." +
                       std::to_string(first + len - 1) + " failed");
}

struct ShardMeta {
  std::string split;
  int64_t shard_index = -1, num_shards = -1;
  DatasetInfo info;
};

std::string dims_str(const std::vector<hsize_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? "," : "") + std::to_string(d[i]);
  return s + "]";
}

std::string type_desc(hid_t t) {
  H5T_class_t c = H5Tget_class(t);
  size_t sz = H5Tget_size(t);
  switch (c) {
    case H5T_INTEGER:
      return std::string(H5Tget_sign(t) == H5T_SGN_NONE ? "uint" : "int") + std::to_string(sz * 8);
    case H5T_FLOAT: return "float" + std::to_string(sz * 8);
    case H5T_STRING: return "string";
    default: return "type class " + std::to_string(static_cast<int>(c));
  }
}

// Opens one shard, checks it on its own, reads its labels (appended to `labels`). Caller holds the lock.
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
    throw UsageError(path + ": cannot open as HDF5 (" + std::to_string(st.st_size) +
                     " bytes; truncated or corrupt file)");
  std::string fmt;
  if (!h5_read_attr_string(s.file, "format", fmt)) throw UsageError(path + ": root attribute 'format' missing or not a string");
  if (fmt != "hpctrain-dataset")
    throw UsageError(path + ": root attribute format = \"" + fmt + "\", expected \"hpctrain-dataset\"");
  int64_t version = 0;
  if (!h5_read_attr_int(s.file, "version", version)) throw UsageError(path + ": root attribute 'version' missing or not an integer");
  if (version != 1) throw UsageError(path + ": root attribute version = " + std::to_string(version) + ", this build reads version 1");
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
  if (nc < 1) throw UsageError(path + ": root attribute num_classes = " + std::to_string(nc) + ", must be >= 1");
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
  for (int i = 0; i < info.channels; ++i)
    if (!(info.std[i] > 0.f) || !std::isfinite(info.mean[i]))
      throw UsageError(path + ": root attribute std[" + std::to_string(i) + "] = " + std::to_string(info.std[i]) +
                       " / mean = " + std::to_string(info.mean[i]) + " (std must be > 0, mean finite)");
  if (!h5_read_attr_string(s.file, "source", info.source)) info.source.clear();

  // /images
  if (H5Lexists(s.file, "images", H5P_DEFAULT) <= 0) throw UsageError(path + ": dataset /images missing");
  H5Handle dapl(HT_H5_CHECK(H5Pcreate(H5P_DATASET_ACCESS)), H5Pclose);
  // A chunk cache big enough for the whole shard's images up to 64 MiB: repeated epochs then copy
  // from memory instead of re-reading chunks (random access touches every chunk many times).
  HT_H5_CHECK(H5Pset_chunk_cache(dapl, 12421, 64u << 20, 1.0));
  s.images = H5Handle(H5Dopen2(s.file, "images", dapl), H5Dclose);
  if (!s.images.valid()) throw UsageError(path + ": dataset /images cannot be opened");
  {
    H5Handle t(H5Dget_type(s.images), H5Tclose);
    if (H5Tget_class(t) != H5T_INTEGER || H5Tget_size(t) != 1 || H5Tget_sign(t) != H5T_SGN_NONE)
      throw UsageError(path + ": dataset /images has dtype " + type_desc(t) + ", expected uint8");
  }
  s.fspace = H5Handle(HT_H5_CHECK(H5Dget_space(s.images)), H5Sclose);
  int rank = H5Sget_simple_extent_ndims(s.fspace);
  std::vector<hsize_t> d(static_cast<size_t>(std::max(rank, 0)));
  if (rank > 0) H5Sget_simple_extent_dims(s.fspace, d.data(), nullptr);
  if (rank != 4) throw UsageError(path + ": dataset /images has shape " + dims_str(d) + ", expected [N,H,W,C]");
  if (static_cast<int64_t>(d[1]) != h || static_cast<int64_t>(d[2]) != w || static_cast<int64_t>(d[3]) != c)
    throw UsageError(path + ": dataset /images has shape " + dims_str(d) + " but the attributes say height=" +
                     std::to_string(h) + " width=" + std::to_string(w) + " channels=" + std::to_string(c));
  if (h < 1 || w < 1 || c < 1) throw UsageError(path + ": dataset /images has empty sample shape " + dims_str(d));
  s.count = static_cast<int64_t>(d[0]);

  // /labels
  if (H5Lexists(s.file, "labels", H5P_DEFAULT) <= 0) throw UsageError(path + ": dataset /labels missing");
  H5Handle lab(H5Dopen2(s.file, "labels", H5P_DEFAULT), H5Dclose);
  if (!lab.valid()) throw UsageError(path + ": dataset /labels cannot be opened");
  {
    H5Handle t(H5Dget_type(lab), H5Tclose);
    if (H5Tget_class(t) != H5T_INTEGER || H5Tget_size(t) != 4 || H5Tget_sign(t) != H5T_SGN_2)
      throw UsageError(path + ": dataset /labels has dtype " + type_desc(t) + ", expected int32");
  }
  H5Handle lspace(HT_H5_CHECK(H5Dget_space(lab)), H5Sclose);
  int lrank = H5Sget_simple_extent_ndims(lspace);
  std::vector<hsize_t> ld(static_cast<size_t>(std::max(lrank, 0)));
  if (lrank > 0) H5Sget_simple_extent_dims(lspace, ld.data(), nullptr);
  if (lrank != 1) throw UsageError(path + ": dataset /labels has shape " + dims_str(ld) + ", expected [N]");
  if (static_cast<int64_t>(ld[0]) != s.count)
    throw UsageError(path + ": dataset /images has " + std::to_string(s.count) + " samples but /labels has " +
                     std::to_string(ld[0]) + " (lengths must match)");
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
  if (s.count > 0) {
    std::vector<uint8_t> buf(static_cast<size_t>(h * w * c));
    for (int64_t r : {int64_t{0}, s.count - 1}) {
      hsize_t start[4] = {static_cast<hsize_t>(r), 0, 0, 0}, cnt[4] = {1, d[1], d[2], d[3]};
      H5Handle ms(HT_H5_CHECK(H5Screate_simple(4, cnt, nullptr)), H5Sclose);
      HT_H5_CHECK(H5Sselect_hyperslab(s.fspace, H5S_SELECT_SET, start, nullptr, cnt, nullptr));
      if (H5Dread(s.images, H5T_NATIVE_UINT8, ms, s.fspace, H5P_DEFAULT, buf.data()) < 0)
        throw UsageError(path + ": dataset /images row " + std::to_string(r) + " cannot be read (truncated or corrupt file)");
    }
  }
  if (!getenv("HT_DATASET_HDF5_READS")) map_chunks(s, h * w * c, static_cast<int64_t>(st.st_size));
  return s;
}

class H5ShardedDataset final : public Dataset {
 public:
  H5ShardedDataset(std::vector<Shard> shards, std::vector<int32_t> labels, DatasetInfo info)
      : shards_(std::move(shards)), labels_(std::move(labels)), info_(std::move(info)) {
    sample_ = static_cast<size_t>(info_.height) * info_.width * info_.channels;
    for (auto& s : shards_) starts_.push_back(s.offset);
  }
  ~H5ShardedDataset() override {
    std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
    shards_.clear();
  }
  const DatasetInfo& info() const override { return info_; }

  void read(std::span<const int64_t> indices, std::span<uint8_t> images, std::span<int32_t> labels) override {
    const size_t n = indices.size();
    if (images.size() != n * sample_ || labels.size() != n)
      throw UsageError("Dataset::read: buffers of " + std::to_string(images.size()) + " bytes / " +
                       std::to_string(labels.size()) + " labels for " + std::to_string(n) + " samples");
    std::vector<std::pair<int64_t, size_t>> order(n);
    for (size_t i = 0; i < n; ++i) {
      if (indices[i] < 0 || indices[i] >= info_.num_samples)
        throw UsageError("Dataset::read: sample index " + std::to_string(indices[i]) + " outside [0, " +
                         std::to_string(info_.num_samples) + ")");
      order[i] = {indices[i], i};
      labels[i] = labels_[static_cast<size_t>(indices[i])];
    }
    std::sort(order.begin(), order.end());
    std::vector<uint8_t> scratch;
    size_t i = 0;
    while (i < n) {
      // A run of consecutive indices inside one shard becomes one hyperslab read.
      int64_t first = order[i].first;
      size_t k = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), first) - starts_.begin()) - 1;
      Shard& s = shards_[k];
      size_t j = i + 1;
      while (j < n && order[j].first <= order[j - 1].first + 1 && order[j].first < s.offset + s.count) ++j;
      // Distinct indices in the run (duplicates are allowed in `indices`).
      int64_t len = order[j - 1].first - first + 1;
      bool direct = (j - i == static_cast<size_t>(len));
      // When the run maps to consecutive output slots we read straight into the output.
      for (size_t q = i + 1; direct && q < j; ++q) direct = order[q].second == order[q - 1].second + 1;
      if (!direct) scratch.resize(static_cast<size_t>(len) * sample_);
      uint8_t* dst = direct ? images.data() + order[i].second * sample_ : scratch.data();
      read_rows(s, first - s.offset, len, sample_, info_, dst);
      if (!direct)
        for (size_t q = i; q < j; ++q)
          std::copy_n(scratch.data() + static_cast<size_t>(order[q].first - first) * sample_, sample_,
                      images.data() + order[q].second * sample_);
      i = j;
    }
  }

 private:
  std::vector<Shard> shards_;
  std::vector<int64_t> starts_;
  std::vector<int32_t> labels_;
  DatasetInfo info_;
  size_t sample_ = 0;
};

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

std::shared_ptr<Dataset> open_shards(const std::vector<std::string>& paths, const std::string& split,
                                     bool check_index) {
  std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
  H5QuietErrors quiet;
  std::vector<Shard> shards;
  std::vector<int32_t> labels;
  DatasetInfo info;
  int64_t offset = 0;
  for (size_t k = 0; k < paths.size(); ++k) {
    ShardMeta m;
    Shard s = open_shard(paths[k], m, labels);
    const std::string& p = paths[k];
    if (check_index) {
      if (m.split != split) throw UsageError(p + ": root attribute split = \"" + m.split + "\", expected \"" + split + "\"");
      if (m.shard_index != static_cast<int64_t>(k) || m.num_shards != static_cast<int64_t>(paths.size()))
        throw UsageError(p + ": root attributes shard_index/num_shards = " + std::to_string(m.shard_index) + "/" +
                         std::to_string(m.num_shards) + " do not match the file name (" + std::to_string(k) + "/" +
                         std::to_string(paths.size()) + ")");
    }
    if (k == 0) {
      info = m.info;
    } else {
      const std::string& f = paths[0];
      auto hwc = [](const DatasetInfo& i) {
        return "H=" + std::to_string(i.height) + " W=" + std::to_string(i.width) + " C=" + std::to_string(i.channels);
      };
      if (m.info.height != info.height || m.info.width != info.width || m.info.channels != info.channels)
        throw UsageError(p + ": dataset /images samples are " + hwc(m.info) + " but " + f + " has " + hwc(info) +
                         " (all shards must agree)");
      check_same(p, f, "num_classes", std::to_string(m.info.num_classes), std::to_string(info.num_classes));
      if (m.info.class_names != info.class_names) check_same(p, f, "class_names", "(different list)", "(another list)");
      check_same(p, f, "mean", floats_str(m.info.mean), floats_str(info.mean));
      check_same(p, f, "std", floats_str(m.info.std), floats_str(info.std));
    }
    s.offset = offset;
    offset += s.count;
    shards.push_back(std::move(s));
  }
  info.num_samples = offset;
  return std::make_shared<H5ShardedDataset>(std::move(shards), std::move(labels), std::move(info));
}

}  // namespace

std::shared_ptr<Dataset> open_dataset_shard(const std::string& path) { return open_shards({path}, "", false); }

std::shared_ptr<Dataset> open_sharded_dataset(const std::string& dir, const std::string& split) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw UsageError(dir + ": dataset directory does not exist");
  // Collect <split>-KKKKK-of-SSSSS.h5 and require one complete, consistently numbered set.
  std::regex re(split + R"(-(\d{5})-of-(\d{5})\.h5)");
  std::map<int, std::string> found;
  int total = -1;
  for (auto& e : fs::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    std::smatch m;
    if (!std::regex_match(name, m, re)) continue;
    int k = std::stoi(m[1]), s = std::stoi(m[2]);
    if (total >= 0 && s != total)
      throw UsageError(e.path().string() + ": shard count " + std::to_string(s) + " in the file name differs from " +
                       std::to_string(total) + " in " + found.begin()->second);
    total = s;
    found[k] = e.path().string();
  }
  if (found.empty())
    throw UsageError(dir + ": no " + split + " shards (" + split + "-00000-of-0000N.h5); prepare the data with "
                     "'hpctrain prepare'");
  std::vector<std::string> paths;
  for (int k = 0; k < total; ++k) {
    auto it = found.find(k);
    if (it == found.end())
      throw UsageError((fs::path(dir) / shard_file_name(split, k, total)).string() + ": dataset shard missing (" +
                       std::to_string(found.size()) + " of " + std::to_string(total) + " present)");
    paths.push_back(it->second);
  }
  if (static_cast<int>(found.size()) != total)
    throw UsageError(found.rbegin()->second + ": shard index beyond num_shards " + std::to_string(total));
  return open_shards(paths, split, true);
}

}  // namespace ht
