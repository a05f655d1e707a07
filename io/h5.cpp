// The shared HDF5 toolkit (io/h5.hpp): library lock, sections, error text, attribute readers.
#include "io/h5.hpp"

#include <algorithm>
#include <cstring>
#include <optional>

#include "io/h5_check.hpp"

namespace ht {

std::recursive_mutex& hdf5_mutex() {
  static std::recursive_mutex m;
  return m;
}

// ---- sections -------------------------------------------------------------------------------

namespace {
// This thread's innermost H5Section, for without_h5_lock (the checkpoint writer releases the lock while
// it computes checksums and writes to disk, so prefetch is blocked only for HDF5's own memory copies).
thread_local H5Section* t_section = nullptr;
}  // namespace

H5Section::H5Section() : lock_(hdf5_mutex()), prev_(t_section) {
  t_section = this;
  H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

H5Section::~H5Section() {
  if (!lock_.owns_lock()) lock_.lock();
  H5Eset_auto2(H5E_DEFAULT, func_, data_);
  t_section = prev_;
}

std::unique_lock<std::recursive_mutex>* h5_section_lock_held() {
  return t_section && t_section->lock_.owns_lock() ? &t_section->lock_ : nullptr;
}

// ---- errors ---------------------------------------------------------------------------------

std::string h5_error_text() {
  std::string desc;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned n, const H5E_error2_t* e, void* d) -> herr_t {
        if (n == 0 && e && e->desc) *static_cast<std::string*>(d) = e->desc;
        return 0;
      },
      &desc);
  auto p = desc.find("error message = '");
  if (p != std::string::npos) {
    auto q = desc.find('\'', p + 17);
    std::string sys = desc.substr(p + 17, q == std::string::npos ? std::string::npos : q - p - 17);
    auto e = desc.find("errno = ");
    if (e != std::string::npos) {
      auto c = desc.find(',', e);
      sys += " (" + desc.substr(e, c == std::string::npos ? std::string::npos : c - e) + ")";
    }
    return sys;
  }
  return desc.empty() ? "unknown HDF5 error" : desc;
}

std::string h5_open_failure_text() {
  std::string reason = h5_error_text();
  std::string all;  // every message of the stack: the lock failure is not always the innermost
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned, const H5E_error2_t* e, void* d) -> herr_t {
        if (e && e->desc) *static_cast<std::string*>(d) += std::string(e->desc) + "; ";
        return 0;
      },
      &all);
  // HDF5 1.10's lock failures say "unable to lock file" (H5FD_sec2_lock, H5F__open); a bare "lock"
  // would also match unrelated text such as "sblock->base_addr" of a truncated file.
  auto says_lock = [](const std::string& t) {
    return t.find("unable to lock file") != std::string::npos || t.find("file locking") != std::string::npos;
  };
  if (says_lock(all)) {
    if (!says_lock(reason)) reason = "unable to lock file: " + reason;
    reason += ". Another process has the file open for writing (HDF5 file locking): wait for it to "
              "finish, or, on a file system whose locks are unreliable, set HDF5_USE_FILE_LOCKING=FALSE";
  }
  return reason;
}

// ---- types, dataspaces, attributes ----------------------------------------------------------

H5Handle h5_vlen_string_type() {
  hid_t t = HT_H5_CHECK(H5Tcopy(H5T_C_S1));
  HT_H5_CHECK(H5Tset_size(t, H5T_VARIABLE));
  HT_H5_CHECK(H5Tset_cset(t, H5T_CSET_UTF8));
  return H5Handle(t, H5Tclose);
}

std::vector<hsize_t> h5_space_dims(hid_t space) {
  int rank = H5Sget_simple_extent_ndims(space);
  std::vector<hsize_t> d(static_cast<size_t>(std::max(rank, 0)));
  if (rank > 0) H5Sget_simple_extent_dims(space, d.data(), nullptr);
  return d;
}

namespace {

// An open attribute with its file type and dataspace.
struct OpenAttr {
  H5Handle attr, type, space;
};

// The attribute `name` of `obj`, when it exists, opens, and its type is of class `cls`.
std::optional<OpenAttr> open_attr(hid_t obj, const char* name, H5T_class_t cls) {
  if (H5Aexists(obj, name) <= 0) return std::nullopt;
  H5Handle a(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  if (!a.valid()) return std::nullopt;
  H5Handle type(H5Aget_type(a), H5Tclose);
  if (H5Tget_class(type) != cls) return std::nullopt;
  H5Handle space(H5Aget_space(a), H5Sclose);
  return OpenAttr{std::move(a), std::move(type), std::move(space)};
}

// Reads a string-typed attribute (fixed or variable length, scalar or 1-D) into `out`.
bool read_attr_string_array(hid_t obj, const char* name, std::vector<std::string>& out) {
  auto at = open_attr(obj, name, H5T_STRING);
  if (!at) return false;
  const H5Handle &a = at->attr, &ftype = at->type, &space = at->space;
  hssize_t n = H5Sget_simple_extent_npoints(space);
  if (n < 0) return false;
  out.clear();
  if (H5Tis_variable_str(ftype) > 0) {
    H5Handle mtype = h5_vlen_string_type();
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
  auto at = open_attr(obj, name, H5T_INTEGER);
  if (!at || H5Sget_simple_extent_npoints(at->space) != 1) return false;
  long long v = 0;
  if (H5Aread(at->attr, H5T_NATIVE_LLONG, &v) < 0) return false;
  out = v;
  return true;
}

bool h5_read_attr_floats(hid_t obj, const char* name, std::vector<float>& out) {
  auto at = open_attr(obj, name, H5T_FLOAT);
  if (!at) return false;
  hssize_t n = H5Sget_simple_extent_npoints(at->space);
  if (n < 0) return false;
  out.assign(static_cast<size_t>(n), 0.f);
  return H5Aread(at->attr, H5T_NATIVE_FLOAT, out.data()) >= 0;
}

}  // namespace ht
