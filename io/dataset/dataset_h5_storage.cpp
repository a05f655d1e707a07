// How a shard's HDF5 objects are stored, checked before anything is read from them: the file format
// a version-2 shard promises (checksummed metadata, no variable-length data), the dtypes of /images
// and /labels bit for bit, and each dataset's layout, filters and stored size against its declaration.
#include <algorithm>
#include <cctype>

#include "io/dataset/dataset_h5_shard.hpp"
#include "base/error.hpp"

namespace ht::dataset_h5 {
namespace {

// zlib's best ratio is about 1032:1; nothing stored compressed can stand for more bytes than that.
constexpr uint64_t kMaxInflation = 1100;
// Every stored chunk takes at least its 8-byte address in the chunk index.
constexpr uint64_t kMinIndexBytesPerChunk = 8;

// Why a datatype may not appear in a version-2 shard (variable-length data lives in HDF5's global
// heap, references point into it); empty when it may.
std::string heap_type_reason(hid_t t) {
  switch (H5Tget_class(t)) {
    case H5T_STRING: return H5Tis_variable_str(t) > 0 ? "a variable-length string" : "";
    case H5T_VLEN: return "a variable-length sequence";
    case H5T_REFERENCE: return "a reference";
    case H5T_ARRAY: {
      H5Handle super(H5Tget_super(t), H5Tclose);
      return super.valid() ? heap_type_reason(super) : "an unreadable array type";
    }
    case H5T_COMPOUND: {
      int n = H5Tget_nmembers(t);
      for (int i = 0; i < n; ++i) {
        H5Handle m(H5Tget_member_type(t, static_cast<unsigned>(i)), H5Tclose);
        std::string r = m.valid() ? heap_type_reason(m) : "an unreadable compound member";
        if (!r.empty()) return "a compound with " + r;
      }
      return "";
    }
    default: return "";
  }
}

// The first attribute of an object whose type may not appear in a version-2 shard.
struct HeapAttr {
  std::string name, reason;
};

herr_t find_heap_attr(hid_t obj, const char* name, const H5A_info_t*, void* data) {
  auto* found = static_cast<HeapAttr*>(data);
  H5Handle a(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  H5Handle t(a.valid() ? H5Aget_type(a) : -1, H5Tclose);
  found->reason = t.valid() ? heap_type_reason(t) : "unreadable";
  if (found->reason.empty()) return 0;
  found->name = name;
  return 1;  // stop: no exception may cross HDF5's C frames
}

// File-declared text (an attribute or filter name) made safe to print.
std::string printable(const char* s, size_t max) {
  std::string out;
  for (size_t i = 0; i < max && s[i]; ++i) out += std::isprint(static_cast<unsigned char>(s[i])) ? s[i] : '?';
  return out;
}

std::string filter_text(H5Z_filter_t id, const char* name) {
  std::string n = printable(name, 64);
  return std::to_string(id) + (n.empty() ? "" : " (" + n + ")");
}

}  // namespace

void check_checksummed_object(const std::string& path, const std::string& what, hid_t obj) {
  H5O_info_t oi{};
  if (H5Oget_info2(obj, &oi, H5O_INFO_HDR) < 0)
    throw UsageError(path + ": " + what + ": object header cannot be read (corrupt file)");
  if (oi.hdr.version < 2)
    throw UsageError(path + ": " + what + " has a version-" + std::to_string(oi.hdr.version) +
                     " object header (no checksum) in a version-2 shard; write it with HDF5 file format 1.10 "
                     "(h5py: libver=(\"v110\", \"v110\"); C: H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_V110))");
  HeapAttr found;
  hsize_t idx = 0;
  if (H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_NATIVE, &idx, find_heap_attr, &found) < 0)
    throw UsageError(path + ": " + what + ": attributes cannot be listed (corrupt file)");
  if (!found.name.empty())
    throw UsageError(path + ": " + what + " attribute '" + printable(found.name.c_str(), 64) + "' is " + found.reason +
                     "; a version-2 shard has fixed-length strings only (h5py: numpy.bytes_ / dtype 'S')");
}

void check_checksummed_format(const std::string& path, hid_t file) {
  H5F_info2_t fi{};
  if (H5Fget_info2(file, &fi) < 0) throw UsageError(path + ": HDF5 superblock cannot be read (corrupt file)");
  if (fi.super.version < 2)
    throw UsageError(path + ": root attribute version = 2 but the file has HDF5 superblock version " +
                     std::to_string(fi.super.version) + " (HDF5's original format, no metadata checksums); "
                     "write it with HDF5 file format 1.10 (h5py: libver=(\"v110\", \"v110\"))");
  check_checksummed_object(path, "root group", file);
}

void check_integer_dtype(const std::string& path, const char* name, hid_t dset, size_t bytes, H5T_sign_t sign) {
  H5Handle t(H5Dget_type(dset), H5Tclose);
  const char* want = bytes == 1 ? "uint8" : "int32";
  if (!t.valid()) throw UsageError(path + ": dataset /" + name + " has an unreadable dtype, expected " + want);
  const size_t size = H5Tget_size(t);
  std::string got;
  switch (H5Tget_class(t)) {
    case H5T_INTEGER: got = std::string(H5Tget_sign(t) == H5T_SGN_NONE ? "uint" : "int") + std::to_string(size * 8); break;
    case H5T_FLOAT: got = "float" + std::to_string(size * 8); break;
    case H5T_STRING: got = "string"; break;
    default: got = "type class " + std::to_string(static_cast<int>(H5Tget_class(t)));
  }
  if (H5Tget_class(t) != H5T_INTEGER || size != bytes || H5Tget_sign(t) != sign)
    throw UsageError(path + ": dataset /" + name + " has dtype " + got + ", expected " + want);
  // Every bit a value bit: samples are read as raw bytes (pread), so a padded type would read differently.
  const size_t precision = H5Tget_precision(t);
  const int offset = H5Tget_offset(t);
  if (precision != bytes * 8 || offset != 0)
    throw UsageError(path + ": dataset /" + name + " has dtype " + got + " with " + std::to_string(precision) +
                     " value bits at bit offset " + std::to_string(offset) + ", expected a plain " + want);
}

void check_storage(const std::string& path, const char* name, hid_t dset, const std::vector<hsize_t>& dims,
                   uint64_t elem_bytes, int64_t file_bytes) {
  const std::string ds = path + ": dataset /" + name;
  uint64_t declared = elem_bytes;
  for (hsize_t d : dims)
    if (d > (uint64_t{1} << 40) || __builtin_mul_overflow(declared, static_cast<uint64_t>(d), &declared))
      throw UsageError(ds + " declares " + std::to_string(dims.empty() ? 0 : dims[0]) + " rows of more bytes than any file can hold");
  H5Handle dcpl(H5Dget_create_plist(dset), H5Pclose);
  if (!dcpl.valid()) throw UsageError(ds + ": storage properties cannot be read (corrupt file)");
  // Data outside the shard file is never read: a truncated or missing external file reads as zeros.
  const int externals = H5Pget_external_count(dcpl);
  if (externals != 0) {
    char file[256] = {0};
    off_t off = 0;
    hsize_t size = 0;
    if (externals > 0) H5Pget_external(dcpl, 0, sizeof file - 1, file, &off, &size);
    throw UsageError(ds + " has layout external (its data in raw file '" + printable(file, sizeof file) +
                     "', H5Pset_external): a shard's data must be inside the shard file (contiguous or chunked)");
  }
  const H5D_layout_t layout = H5Pget_layout(dcpl);
  if (layout == H5D_VIRTUAL)
    throw UsageError(ds + " has layout virtual (its data in other files): a shard's data must be inside the shard file "
                     "(contiguous or chunked)");
  if (layout != H5D_CONTIGUOUS && layout != H5D_CHUNKED && layout != H5D_COMPACT)
    throw UsageError(ds + " has unknown layout " + std::to_string(static_cast<int>(layout)));
  const int nfilters = H5Pget_nfilters(dcpl);
  if (nfilters < 0) throw UsageError(ds + ": filter pipeline cannot be read (corrupt file)");
  for (int i = 0; i < nfilters; ++i) {
    unsigned flags = 0, config = 0;
    size_t nelem = 8;
    unsigned cd[8];
    char fname[65] = {0};
    H5Z_filter_t id = H5Pget_filter2(dcpl, static_cast<unsigned>(i), &flags, &nelem, cd, sizeof fname - 1, fname, &config);
    if (id != H5Z_FILTER_DEFLATE && id != H5Z_FILTER_SHUFFLE && id != H5Z_FILTER_FLETCHER32)
      throw UsageError(ds + " uses HDF5 filter " + filter_text(id, fname) +
                       "; a shard may use only deflate (gzip, 1), shuffle (2) and fletcher32 (3)");
  }
  const uint64_t stored = H5Dget_storage_size(dset);
  const uint64_t fsize = static_cast<uint64_t>(file_bytes);
  if (layout == H5D_COMPACT) {
    // Compact data sits in the object header: its size must be exactly the declared one.
    if (stored != declared)
      throw UsageError(ds + " declares " + std::to_string(declared) + " bytes but its compact storage holds " +
                       std::to_string(stored) + " (corrupt file)");
    return;
  }
  if (nfilters == 0 && stored < declared)
    throw UsageError(ds + " declares " + std::to_string(declared) + " bytes but " + std::to_string(stored) +
                     " are stored (no data written, or the file is truncated or corrupt)");
  if (nfilters > 0 && declared > fsize * kMaxInflation)
    throw UsageError(ds + " declares " + std::to_string(declared) + " bytes in a " + std::to_string(fsize) +
                     "-byte file, beyond any compression ratio");
  if (layout != H5D_CHUNKED || declared == 0) return;
  // Every chunk must be stored: a missing one reads as the fill value, not as an error.
  std::vector<hsize_t> cd(dims.size(), 0);
  if (H5Pget_chunk(dcpl, static_cast<int>(cd.size()), cd.data()) != static_cast<int>(cd.size()))
    throw UsageError(ds + ": chunk shape cannot be read (corrupt file)");
  uint64_t expected = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (cd[i] == 0) throw UsageError(ds + " has a chunk dimension of 0 (corrupt file)");
    if (__builtin_mul_overflow(expected, (dims[i] + cd[i] - 1) / cd[i], &expected)) expected = UINT64_MAX;
  }
  if (expected > fsize / kMinIndexBytesPerChunk)
    throw UsageError(ds + " declares " + std::to_string(expected) + " chunks, more than a " + std::to_string(fsize) +
                     "-byte file can hold (no data written, or the file is truncated or corrupt)");
  hsize_t nchunks = 0;
  H5Handle space(H5Dget_space(dset), H5Sclose);  // HDF5 1.10 refuses H5S_ALL here
  if (!space.valid() || H5Dget_num_chunks(dset, space, &nchunks) < 0)
    throw UsageError(ds + ": chunk index cannot be read (truncated or corrupt file)");
  if (nchunks != expected)
    throw UsageError(ds + " has " + std::to_string(nchunks) + " of its " + std::to_string(expected) +
                     " chunks stored (the others would read as the fill value: data never written, or a corrupt file)");
}

}  // namespace ht::dataset_h5
