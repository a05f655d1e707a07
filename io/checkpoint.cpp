#include "io/checkpoint.hpp"

#include <fcntl.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "io/dataset.hpp"
#include "src/base/error.hpp"

namespace fs = std::filesystem;

namespace ht {
namespace {

constexpr const char* kFormat = "hpctrain-checkpoint";
constexpr int kVersion = 1;
constexpr size_t kChunkBytes = size_t(1) << 20;  // ~1 MiB chunks: one checksum each, fits the chunk cache
const char* const kReserved[] = {"meta", "ints", "floats", "strings"};

// Every HDF5 call in the process runs under hdf5_mutex() (io/dataset.hpp: the team's rule, so the
// dataset prefetch thread and the checkpoint writer thread never call HDF5 at once). HDF5 prints its
// error stack to stderr by default; we turn failures into our own messages, so the automatic
// printing is switched off while a section runs. The checkpoint writer releases the lock while it
// computes checksums (t_h5_lock), so prefetch is blocked only for HDF5's own memory copies.
thread_local std::unique_lock<std::recursive_mutex>* t_h5_lock = nullptr;

class H5Section {
 public:
  H5Section() : lock_(hdf5_mutex()), prev_(t_h5_lock) {
    t_h5_lock = &lock_;
    H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~H5Section() {
    if (!lock_.owns_lock()) lock_.lock();
    H5Eset_auto2(H5E_DEFAULT, func_, data_);
    t_h5_lock = prev_;
  }
  H5Section(const H5Section&) = delete;
  H5Section& operator=(const H5Section&) = delete;

 private:
  std::unique_lock<std::recursive_mutex> lock_;
  std::unique_lock<std::recursive_mutex>* prev_;
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

// Runs f() without the HDF5 lock (f must not call HDF5).
template <class F> auto without_h5_lock(F&& f) {
  struct Relock {
    std::unique_lock<std::recursive_mutex>* l;
    ~Relock() {
      if (l) l->lock();
    }
  } relock{t_h5_lock && t_h5_lock->owns_lock() ? t_h5_lock : nullptr};
  if (relock.l) relock.l->unlock();
  return f();
}

// The innermost HDF5 error of the current stack, shortened to the system error when there is one
// ("error message = 'No space left on device'").
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

// Failure inside this file; converted to RuntimeError (writes) or UsageError (reads) with the path.
struct H5Fail : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <class T> T h5(T rc, const std::string& what) {
  if (rc < 0) throw H5Fail(what + ": " + h5_error_text());
  return rc;
}

// Owns an hid_t and closes it with the matching H5*close.
class Hid {
 public:
  Hid() = default;
  Hid(hid_t id, herr_t (*closer)(hid_t)) : id_(id), closer_(closer) {}
  Hid(const Hid&) = delete;
  Hid& operator=(const Hid&) = delete;
  Hid(Hid&& o) noexcept : id_(o.id_), closer_(o.closer_) { o.id_ = -1; }
  ~Hid() { reset(); }
  hid_t get() const { return id_; }
  operator hid_t() const { return id_; }
  void reset() {
    if (id_ >= 0 && closer_) closer_(id_);
    id_ = -1;
  }
  // Close, reporting failure (file close flushes: that is where a full disk often shows up).
  void close_checked(const std::string& what) {
    if (id_ < 0) return;
    hid_t id = id_;
    id_ = -1;
    h5(closer_(id), what);
  }

 private:
  hid_t id_ = -1;
  herr_t (*closer_)(hid_t) = nullptr;
};

void check_name(const std::string& name, bool tensor) {
  if (name.empty() || name.front() == '/' || name.back() == '/' || name.find("//") != std::string::npos ||
      name.find('\n') != std::string::npos || name == "." || name.find("/./") != std::string::npos)
    throw RuntimeError("checkpoint: invalid entry name '" + name + "'");
  if (!tensor && name.find('/') != std::string::npos)
    throw RuntimeError("checkpoint: key '" + name + "' must not contain '/'");
  if (tensor) {
    std::string top = name.substr(0, name.find('/'));
    for (auto* r : kReserved)
      if (top == r) throw RuntimeError("checkpoint: tensor name '" + name + "' uses the reserved group /" + top);
  }
}

}  // namespace

// Rows of dimension 0 per chunk: about kChunkBytes per chunk, spread evenly so the padded edge chunk
// (HDF5 stores edge chunks whole) wastes less than one row per chunk.
static hsize_t chunk_rows(hsize_t rows, size_t row_bytes) {
  if (rows == 0) return 1;
  size_t total = static_cast<size_t>(rows) * std::max<size_t>(row_bytes, 1);
  hsize_t nchunks = (total + kChunkBytes - 1) / kChunkBytes;
  nchunks = std::clamp<hsize_t>(nchunks, 1, rows);
  return (rows + nchunks - 1) / nchunks;
}

// HDF5's Fletcher-32 (H5checksum.c, H5_checksum_fletcher32) over big-endian 16-bit words w_0..w_{n-1}
// (an odd last byte counts as its high byte). HDF5 folds its two 32-bit sums with end-around carry,
// which keeps them congruent modulo 65535 and positive once any word is non-zero; so its result is
// f(S) | f(T) << 16 with S = sum w_i, T = sum (n - i) w_i and f(0) = 0, f(x) = 1 + (x - 1) mod 65535.
// Blocks of 8 KiB are copied to dst (when non-null) and summed from L1 in 16 lanes of 32-bit sums
// with no multiplies (SSE2 on x86-64; a portable loop elsewhere): about 3x the earlier 64-bit loop.
uint32_t fletcher32_copy(unsigned char* dst, const unsigned char* src, size_t nbytes) {
  constexpr uint64_t kMod = 65535;
  constexpr size_t kLanes = 16;                 // words summed side by side (vector lanes)
  constexpr size_t kGroups = 256;               // q below 65535 * 256 * 255 / 2 < 2^32
  constexpr size_t kBlock = kLanes * kGroups;   // 4096 words = 8 KiB, stays in L1 after the copy
  size_t n = nbytes / 2;
  uint64_t S = 0, T = 0;                        // S exact; T modulo 65535
  size_t i0 = 0;
  for (; i0 + kBlock <= n; i0 += kBlock) {
    const unsigned char* p = src + 2 * i0;
    if (dst) {
      std::memcpy(dst + 2 * i0, p, 2 * kBlock);
      p = dst + 2 * i0;
    }
    // Lane l sums words l, l + L, l + 2L, ... (s) and, before each group, adds its running sum (q).
    // Then the block's sum_i (kBlock - i) w_i = L * sum_l q_l + sum_l (L - l) s_l: no multiplies.
    uint32_t s[kLanes] = {}, q[kLanes] = {};
#if defined(__SSE2__)
    {  // the same loop in SSE2 (x86-64 baseline): GCC does not vectorise the byte swap + widening
      const __m128i zero = _mm_setzero_si128();
      __m128i s0 = zero, s1 = zero, s2 = zero, s3 = zero, q0 = zero, q1 = zero, q2 = zero, q3 = zero;
      for (size_t g = 0; g < kGroups; ++g) {
        __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 32 * g));
        __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 32 * g + 16));
        a = _mm_or_si128(_mm_slli_epi16(a, 8), _mm_srli_epi16(a, 8));  // big-endian words
        b = _mm_or_si128(_mm_slli_epi16(b, 8), _mm_srli_epi16(b, 8));
        q0 = _mm_add_epi32(q0, s0), q1 = _mm_add_epi32(q1, s1), q2 = _mm_add_epi32(q2, s2), q3 = _mm_add_epi32(q3, s3);
        s0 = _mm_add_epi32(s0, _mm_unpacklo_epi16(a, zero));  // lanes 0-3
        s1 = _mm_add_epi32(s1, _mm_unpackhi_epi16(a, zero));  // lanes 4-7
        s2 = _mm_add_epi32(s2, _mm_unpacklo_epi16(b, zero));  // lanes 8-11
        s3 = _mm_add_epi32(s3, _mm_unpackhi_epi16(b, zero));  // lanes 12-15
      }
      _mm_storeu_si128(reinterpret_cast<__m128i*>(s), s0), _mm_storeu_si128(reinterpret_cast<__m128i*>(s + 4), s1);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(s + 8), s2), _mm_storeu_si128(reinterpret_cast<__m128i*>(s + 12), s3);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q), q0), _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 4), q1);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 8), q2), _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 12), q3);
    }
#else
    for (size_t g = 0; g < kGroups; ++g)
      for (size_t l = 0; l < kLanes; ++l) {
        uint32_t w = (static_cast<uint32_t>(p[2 * (g * kLanes + l)]) << 8) | p[2 * (g * kLanes + l) + 1];
        q[l] += s[l];
        s[l] += w;
      }
#endif
    uint64_t sb = 0, tb = 0;
    for (size_t l = 0; l < kLanes; ++l) sb += s[l], tb += kLanes * uint64_t(q[l]) + (kLanes - l) * uint64_t(s[l]);
    // words after this block weigh in too: sum_i (n - i0 - i) w_i = tb + (n - i0 - kBlock) * sb
    T = (T + tb % kMod + ((n - i0 - kBlock) % kMod) * (sb % kMod)) % kMod;
    S += sb;
  }
  for (size_t i = i0; i < n; ++i) {
    uint64_t w = (static_cast<uint32_t>(src[2 * i]) << 8) | src[2 * i + 1];
    S += w;
    T = (T + ((n - i) % kMod) * w) % kMod;
  }
  if (dst && i0 < n) std::memcpy(dst + 2 * i0, src + 2 * i0, 2 * (n - i0));
  if (nbytes % 2) {
    uint32_t w = static_cast<uint32_t>(src[nbytes - 1]) << 8;
    if (dst) dst[nbytes - 1] = src[nbytes - 1];
    S += w;
    T = (T + S) % kMod;  // the extra word is added to sum1, then sum1 to sum2
  }
  // HDF5's folded sums are 0 only when every word is 0, else in [1, 65535]
  auto f = [](uint64_t x) -> uint32_t { return x == 0 ? 0u : static_cast<uint32_t>(1 + (x - 1) % kMod); };
  uint32_t fT = S == 0 ? 0u : (T == 0 ? 65535u : static_cast<uint32_t>(T));
  return (fT << 16) | f(S);
}

uint32_t fletcher32_reference(const unsigned char* data, size_t nbytes) {
  size_t len = nbytes / 2;
  uint32_t sum1 = 0, sum2 = 0;
  while (len) {
    size_t tlen = len > 360 ? 360 : len;
    len -= tlen;
    do {
      sum1 += static_cast<uint32_t>((static_cast<uint32_t>(data[0]) << 8) | data[1]);
      data += 2;
      sum2 += sum1;
    } while (--tlen);
    sum1 = (sum1 & 0xffff) + (sum1 >> 16);
    sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  }
  if (nbytes % 2) {
    sum1 += static_cast<uint32_t>(*data) << 8;
    sum2 += sum1;
    sum1 = (sum1 & 0xffff) + (sum1 >> 16);
    sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  }
  sum1 = (sum1 & 0xffff) + (sum1 >> 16);
  sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  return (sum2 << 16) | sum1;
}

namespace {

// pwrite everything (EINTR retried); errors come back as errno text, never through HDF5.
void pwrite_all(int fd, const char* data, size_t size, uint64_t offset) {
  size_t done = 0;
  while (done < size) {
    ssize_t w = ::pwrite(fd, data + done, std::min<size_t>(size - done, size_t(1) << 26), static_cast<off_t>(offset + done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      int err = w < 0 ? errno : ENOSPC;
      throw H5Fail("write at offset " + std::to_string(offset + done) + ": " + std::strerror(err));
    }
    done += static_cast<size_t>(w);
  }
}

// Receives the core driver's buffer when the in-memory file closes (file image callbacks), so we get
// the file exactly as HDF5 leaves it after close. (H5Fget_file_image on an open 1.10-format file
// returns a superblock whose checksum does not match its cleared status flags.)
// One reusable image buffer: after the first checkpoint its pages are already faulted in, so later
// checkpoints do not pay ~25k page faults per 100 MB. Taken by one build at a time.
struct ImageBuffer {
  void* ptr = nullptr;
  size_t cap = 0;
};
std::mutex g_image_cache_mu;
ImageBuffer g_image_cache;

// Keeps the larger of `b` and the cached buffer in the cache, frees the other.
void return_to_cache(ImageBuffer& b) {
  if (!b.ptr) return;
  std::lock_guard<std::mutex> lk(g_image_cache_mu);
  if (g_image_cache.cap < b.cap && b.cap <= (size_t(4) << 30)) std::swap(g_image_cache, b);
  std::free(b.ptr);
  b = {};
}

struct ImageCapture {
  ImageBuffer buf;        // our buffer (from the cache or grown here)
  bool in_use = false;    // handed to the core driver
  void* closed = nullptr; // the buffer the driver released at file close (the finished image)
  ImageCapture() {
    std::lock_guard<std::mutex> lk(g_image_cache_mu);
    std::swap(buf, g_image_cache);
  }
  ImageCapture(const ImageCapture&) = delete;
  ImageCapture& operator=(const ImageCapture&) = delete;
  ~ImageCapture() {
    if (!in_use) return_to_cache(buf);  // still in use: HDF5 failed to close; leave it to HDF5
  }
};
void* img_malloc(size_t size, H5FD_file_image_op_t, void*) { return std::malloc(size); }
void* img_memcpy(void* dst, const void* src, size_t size, H5FD_file_image_op_t, void*) {
  return std::memcpy(dst, src, size);
}
void* img_realloc(void* ptr, size_t size, H5FD_file_image_op_t, void* udata) {
  auto* c = static_cast<ImageCapture*>(udata);
  if ((ptr == nullptr && !c->in_use) || (ptr != nullptr && ptr == c->buf.ptr)) {
    if (size > c->buf.cap) {
      void* n = std::realloc(c->buf.ptr, size);
      if (!n) return nullptr;
      c->buf.ptr = n;
      c->buf.cap = size;
    }
    c->in_use = true;
    return c->buf.ptr;
  }
  return std::realloc(ptr, size);
}
herr_t img_free(void* ptr, H5FD_file_image_op_t op, void* udata) {
  auto* c = static_cast<ImageCapture*>(udata);
  if (ptr != nullptr && ptr == c->buf.ptr) {
    c->in_use = false;
    if (op == H5FD_FILE_IMAGE_OP_FILE_CLOSE) c->closed = ptr;
  } else {
    std::free(ptr);
  }
  return 0;
}
void* img_udata_copy(void* udata) { return udata; }
herr_t img_udata_free(void*) { return 0; }


// The HDF5 file is built in memory (core driver: HDF5 itself never does disk I/O, so a full disk or
// a file-size limit is an errno from our own pwrite, and never leaves an HDF5 file half-closed). Each
// chunk is written to the file from the image as soon as HDF5 has placed it (its address from
// H5Dget_chunk_info_by_coord; raw chunks are never moved or rewritten), and after every kKickBytes we
// ask the kernel to start writing back (sync_file_range), so the disk works while later chunks are
// checksummed; at close only the metadata between the chunks is left to write, and the final fsync
// only waits for the tail.
constexpr size_t kKickBytes = size_t(8) << 20;
struct Stream {
  int fd = -1;
  ImageCapture* cap = nullptr;
  std::vector<std::pair<uint64_t, uint64_t>> written;  // (address, size) of every chunk already in the file
  size_t total = 0;         // chunk bytes the whole file will carry (for the half-way test hook)
  size_t done = 0;          // chunk bytes written so far
  size_t since_kick = 0;
  double delay_ms = 0;      // test hook: sleep once when half the chunk bytes are written
  bool slept = false;

  // After H5Dwrite_chunk of `data` (`bytes` with its checksum) as the chunk at `offset` of `ds`: write
  // the same bytes to the file where the image has them, maybe start write-back, maybe sleep (test
  // hook); the last three without the HDF5 lock. (Written from `data`, still in cache, not the image.)
  void chunk_written(hid_t ds, const hsize_t* offset, const unsigned char* data, size_t bytes) {
    unsigned mask = 0;
    haddr_t addr = 0;
    hsize_t size = 0;
    h5(H5Dget_chunk_info_by_coord(ds, offset, &mask, &addr, &size), "H5Dget_chunk_info_by_coord");
    if (size != bytes || !cap->in_use || !cap->buf.ptr || addr + size > cap->buf.cap)
      throw H5Fail("HDF5 core driver image is not where expected");
    without_h5_lock([&] {
      pwrite_all(fd, reinterpret_cast<const char*>(data), bytes, addr);
      return 0;
    });
    written.emplace_back(addr, size);
    done += bytes;
    since_kick += bytes;
    if (since_kick >= kKickBytes) {
      since_kick = 0;
      int f = fd;
      // Only a hint: failures (EIO, ...) surface again at the fsync that follows.
      without_h5_lock([f] { return ::sync_file_range(f, 0, 0, SYNC_FILE_RANGE_WRITE); });
    }
    maybe_sleep();
  }
  void maybe_sleep() {
    if (!slept && delay_ms > 0 && 2 * done >= total) {
      slept = true;
      without_h5_lock([this] {
        std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(delay_ms));
        return 0;
      });
    }
  }
};

// Bytes of chunk data (edge chunks padded, checksums included) that write_dataset stores for dims.
size_t chunked_bytes(std::vector<hsize_t> dims, size_t elem_size);

// Chunked dataset with fletcher32: chunks along dimension 0 of about kChunkBytes.
void write_dataset(hid_t loc, const std::string& name, hid_t memtype, hid_t filetype, std::vector<hsize_t> dims,
                   size_t elem_size, const void* data, hid_t lcpl, Stream* stream) {
  if (dims.empty()) dims.push_back(1);
  size_t numel = 1;
  for (auto d : dims) numel *= d;
  std::vector<hsize_t> maxdims = dims, chunk = dims;
  size_t row_bytes = elem_size;
  for (size_t i = 1; i < dims.size(); ++i) row_bytes *= std::max<hsize_t>(dims[i], 1);
  chunk[0] = chunk_rows(dims[0], row_bytes);
  for (size_t i = 0; i < dims.size(); ++i) {
    if (chunk[i] == 0) chunk[i] = 1;
    if (dims[i] == 0) maxdims[i] = H5S_UNLIMITED;  // a chunk may not exceed a fixed zero extent
  }
  Hid space(h5(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), maxdims.data()), "H5Screate_simple " + name),
            H5Sclose);
  Hid dcpl(h5(H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate"), H5Pclose);
  h5(H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data()), "H5Pset_chunk " + name);
  h5(H5Pset_fletcher32(dcpl), "H5Pset_fletcher32 " + name);
  Hid ds(h5(H5Dcreate2(loc, name.c_str(), filetype, space, lcpl, dcpl, H5P_DEFAULT), "create dataset /" + name),
         H5Dclose);
  if (numel > 0) {
    // Direct chunk writes (H5Dwrite_chunk) with our own fletcher32: one copy per chunk instead of
    // the filter pipeline's several (HDF5 verifies these checksums on every read).
    size_t row_elems = 1;
    for (size_t i = 1; i < dims.size(); ++i) row_elems *= dims[i];
    size_t chunk_bytes = static_cast<size_t>(chunk[0]) * row_elems * elem_size;
    std::vector<unsigned char> buf(chunk_bytes + 4);
    std::vector<hsize_t> offset(dims.size(), 0);
    const auto* src = static_cast<const unsigned char*>(data);
    for (hsize_t r0 = 0; r0 < dims[0]; r0 += chunk[0]) {
      size_t rows = static_cast<size_t>(std::min<hsize_t>(chunk[0], dims[0] - r0));
      size_t bytes = rows * row_elems * elem_size;
      uint32_t ck;
      if (bytes < chunk_bytes) {  // edge chunk: padded with the fill value (0) and checksummed whole
        std::memcpy(buf.data(), src + static_cast<size_t>(r0) * row_elems * elem_size, bytes);
        std::memset(buf.data() + bytes, 0, chunk_bytes - bytes);
        ck = without_h5_lock([&] { return fletcher32_copy(nullptr, buf.data(), chunk_bytes); });
      } else {
        ck = without_h5_lock([&] {
          return fletcher32_copy(buf.data(), src + static_cast<size_t>(r0) * row_elems * elem_size, chunk_bytes);
        });
      }
      for (int i = 0; i < 4; ++i) buf[chunk_bytes + static_cast<size_t>(i)] = static_cast<unsigned char>(ck >> (8 * i));
      offset[0] = r0;
      h5(H5Dwrite_chunk(ds, H5P_DEFAULT, 0, offset.data(), buf.size(), buf.data()), "write dataset /" + name);
      if (stream) stream->chunk_written(ds, offset.data(), buf.data(), buf.size());
    }
  }
  ds.close_checked("close dataset /" + name);
}

void write_text(hid_t loc, const std::string& name, const std::string& text, hid_t lcpl, Stream* stream) {
  write_dataset(loc, name, H5T_NATIVE_UINT8, H5T_STD_U8LE, {static_cast<hsize_t>(text.size())}, 1, text.data(), lcpl,
                stream);
}

size_t chunked_bytes(std::vector<hsize_t> dims, size_t elem_size) {
  if (dims.empty()) dims.push_back(1);
  size_t row_bytes = elem_size;
  for (size_t i = 1; i < dims.size(); ++i) row_bytes *= dims[i];
  if (dims[0] == 0 || row_bytes == 0) return 0;
  hsize_t cr = chunk_rows(dims[0], row_bytes);
  hsize_t n = (dims[0] + cr - 1) / cr;
  return static_cast<size_t>(n) * (static_cast<size_t>(cr) * row_bytes + 4);
}

void write_string_attr(hid_t loc, const char* name, const std::string& v) {
  Hid type(h5(H5Tcopy(H5T_C_S1), "H5Tcopy"), H5Tclose);
  h5(H5Tset_size(type, std::max<size_t>(v.size(), 1)), "H5Tset_size");
  h5(H5Tset_strpad(type, H5T_STR_NULLPAD), "H5Tset_strpad");
  Hid space(h5(H5Screate(H5S_SCALAR), "H5Screate"), H5Sclose);
  Hid a(h5(H5Acreate2(loc, name, type, space, H5P_DEFAULT, H5P_DEFAULT), std::string("create attribute ") + name),
        H5Aclose);
  h5(H5Awrite(a, type, v.c_str()), std::string("write attribute ") + name);
}

void write_int_attr(hid_t loc, const char* name, int64_t v) {
  Hid space(h5(H5Screate(H5S_SCALAR), "H5Screate"), H5Sclose);
  Hid a(h5(H5Acreate2(loc, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT), std::string("create attribute ") + name),
        H5Aclose);
  h5(H5Awrite(a, H5T_NATIVE_INT64, &v), std::string("write attribute ") + name);
}

std::string read_string_attr(hid_t loc, const char* name) {
  Hid a(h5(H5Aopen(loc, name, H5P_DEFAULT), std::string("attribute ") + name + " missing"), H5Aclose);
  Hid ftype(h5(H5Aget_type(a), "H5Aget_type"), H5Tclose);
  if (H5Tget_class(ftype) != H5T_STRING) throw H5Fail(std::string("attribute ") + name + " is not a string");
  if (H5Tis_variable_str(ftype) > 0) throw H5Fail(std::string("attribute ") + name + " is a variable-length string");
  size_t n = H5Tget_size(ftype);
  std::string buf(n, '\0');
  Hid mtype(h5(H5Tcopy(H5T_C_S1), "H5Tcopy"), H5Tclose);
  h5(H5Tset_size(mtype, n), "H5Tset_size");
  h5(H5Tset_strpad(mtype, H5T_STR_NULLPAD), "H5Tset_strpad");
  h5(H5Aread(a, mtype, buf.data()), std::string("read attribute ") + name);
  buf.resize(strnlen(buf.c_str(), n));
  return buf;
}

int64_t read_int_attr(hid_t loc, const char* name) {
  Hid a(h5(H5Aopen(loc, name, H5P_DEFAULT), std::string("attribute ") + name + " missing"), H5Aclose);
  int64_t v = 0;
  h5(H5Aread(a, H5T_NATIVE_INT64, &v), std::string("read attribute ") + name);
  return v;
}

bool has_fletcher32(hid_t ds) {
  Hid dcpl(h5(H5Dget_create_plist(ds), "H5Dget_create_plist"), H5Pclose);
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
Hid open_checked(hid_t f, const std::string& name, H5T_class_t cls, size_t size, std::vector<hsize_t>* dims) {
  if (H5Lexists(f, name.c_str(), H5P_DEFAULT) <= 0) throw H5Fail("dataset /" + name + " is missing");
  Hid ds(h5(H5Dopen2(f, name.c_str(), H5P_DEFAULT), "open dataset /" + name), H5Dclose);
  Hid type(h5(H5Dget_type(ds), "H5Dget_type /" + name), H5Tclose);
  if (H5Tget_class(type) != cls || H5Tget_size(type) != size)
    throw H5Fail("dataset /" + name + " has the wrong element type");
  if (!has_fletcher32(ds)) throw H5Fail("dataset /" + name + " has no fletcher32 checksum");
  Hid space(h5(H5Dget_space(ds), "H5Dget_space /" + name), H5Sclose);
  int nd = h5(H5Sget_simple_extent_ndims(space), "ndims /" + name);
  dims->assign(static_cast<size_t>(nd), 0);
  h5(H5Sget_simple_extent_dims(space, dims->data(), nullptr), "dims /" + name);
  return ds;
}

std::string read_text(hid_t f, const std::string& name) {
  std::vector<hsize_t> dims;
  Hid ds = open_checked(f, name, H5T_INTEGER, 1, &dims);
  if (dims.size() != 1) throw H5Fail("dataset /" + name + " is not 1-d");
  std::string s(dims[0], '\0');
  if (!s.empty()) h5(H5Dread(ds, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, s.data()), "read /" + name + " (checksum)");
  return s;
}

// Names of the members of group `g` (absent group: empty).
std::vector<std::string> group_members(hid_t f, const char* g) {
  std::vector<std::string> out;
  if (H5Lexists(f, g, H5P_DEFAULT) <= 0) return out;
  Hid grp(h5(H5Gopen2(f, g, H5P_DEFAULT), std::string("open group /") + g), H5Gclose);
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

Hid open_file(const std::string& path) {
  Hid fapl(h5(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate"), H5Pclose);
  h5(H5Pset_file_locking(fapl, false, true), "H5Pset_file_locking");
  return Hid(h5(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl), "open as HDF5"), H5Fclose);
}

CheckpointData read_file_impl(const std::string& path) {
  if (!fs::is_regular_file(path)) throw H5Fail("no such file");
  Hid f = open_file(path);
  std::string format = read_string_attr(f, "format");
  if (format != kFormat) throw H5Fail("root attribute format = '" + format + "', expected '" + kFormat + "'");
  int64_t version = read_int_attr(f, "version");
  if (version != kVersion)
    throw H5Fail("root attribute version = " + std::to_string(version) + ", this build reads version " +
                 std::to_string(kVersion));
  CheckpointData d;
  std::string index = read_text(f, "meta/tensor_names");
  std::istringstream is(index);
  std::string name;
  while (std::getline(is, name)) {
    if (name.empty()) continue;
    std::vector<hsize_t> dims;
    Hid ds = open_checked(f, name, H5T_FLOAT, 4, &dims);
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
  for (auto& key : group_members(f, "ints")) {
    std::vector<hsize_t> dims;
    Hid ds = open_checked(f, "ints/" + key, H5T_INTEGER, 8, &dims);
    if (dims != std::vector<hsize_t>{1}) throw H5Fail("dataset /ints/" + key + " is not [1]");
    int64_t v = 0;
    h5(H5Dread(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v), "read /ints/" + key + " (checksum)");
    d.ints[key] = v;
  }
  for (auto& key : group_members(f, "floats")) {
    std::vector<hsize_t> dims;
    Hid ds = open_checked(f, "floats/" + key, H5T_FLOAT, 8, &dims);
    if (dims != std::vector<hsize_t>{1}) throw H5Fail("dataset /floats/" + key + " is not [1]");
    double v = 0;
    h5(H5Dread(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v), "read /floats/" + key + " (checksum)");
    d.floats[key] = v;
  }
  for (auto& key : group_members(f, "strings")) d.strings[key] = read_text(f, "strings/" + key);
  if (!d.ints.count("step")) throw H5Fail("dataset /ints/step is missing");
  f.close_checked("close");
  return d;
}

void fsync_path(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), (directory ? O_DIRECTORY : 0) | O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw H5Fail("open " + path + " for fsync: " + std::strerror(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) throw H5Fail("fsync " + path + ": " + std::strerror(err));
}

// Writes a small text file atomically: temporary name, fsync, rename, directory fsync.
void write_small_file_atomic(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw H5Fail("create " + tmp + ": " + std::strerror(errno));
  ssize_t w = ::write(fd, text.data(), text.size());
  int err = errno;
  bool ok = w == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  if (!ok && w >= 0) err = errno ? errno : EIO;
  ::close(fd);
  if (!ok) {
    ::unlink(tmp.c_str());
    throw H5Fail("write " + tmp + ": " + std::strerror(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    err = errno;
    ::unlink(tmp.c_str());
    throw H5Fail("rename " + tmp + " to " + path + ": " + std::strerror(err));
  }
  fsync_path(fs::path(path).parent_path().string().empty() ? "." : fs::path(path).parent_path().string(), true);
}

bool is_temporary_name(const std::string& name) { return name.find(".tmp.") != std::string::npos; }

std::string human_bytes(size_t b) {
  char buf[64];
  if (b >= (size_t(1) << 20)) std::snprintf(buf, sizeof buf, "%zu bytes (%.1f MiB)", b, b / 1048576.0);
  else std::snprintf(buf, sizeof buf, "%zu bytes", b);
  return buf;
}

size_t free_bytes(const std::string& dir) {
  struct statvfs s {};
  if (::statvfs(dir.c_str(), &s) != 0) return SIZE_MAX;
  return static_cast<size_t>(s.f_bavail) * static_cast<size_t>(s.f_frsize);
}

}  // namespace

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

std::string checkpoint_dir(const std::string& run_dir) { return (fs::path(run_dir) / "checkpoints").string(); }

std::string checkpoint_path(const std::string& run_dir, int64_t step) {
  char name[64];
  std::snprintf(name, sizeof name, "step-%08" PRId64 ".h5", step);
  return (fs::path(checkpoint_dir(run_dir)) / name).string();
}

int64_t checkpoint_step_from_name(const std::string& filename) {
  // step-<digits>.h5 exactly; temporary (".tmp.PID") and quarantined (".bad") names do not match.
  if (filename.size() < 9 || filename.rfind("step-", 0) != 0 || filename.substr(filename.size() - 3) != ".h5")
    return -1;
  std::string digits = filename.substr(5, filename.size() - 8);
  if (digits.empty() || digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return -1;
  return std::stoll(digits);
}

size_t checkpoint_expected_bytes(const CheckpointData& d) {
  size_t datasets = d.tensors.size() + d.ints.size() + d.floats.size() + d.strings.size() + 1;
  size_t chunks = 0, text = 0, padding = 0;
  for (auto& [name, t] : d.tensors) {
    hsize_t rows = t.ndim() ? static_cast<hsize_t>(t.dim(0)) : 1;
    size_t row_bytes = rows ? static_cast<size_t>(t.numel()) * 4 / rows : 0;
    hsize_t cr = chunk_rows(rows, row_bytes);
    hsize_t n = rows ? (rows + cr - 1) / cr : 0;
    chunks += n + 1;
    padding += static_cast<size_t>(n * cr - rows) * row_bytes + 4 * n;  // padded edge chunk, checksums
  }
  for (auto& [k, s] : d.strings) text += s.size();
  for (auto& [n, t] : d.tensors) text += n.size() + 1;
  // Object headers, chunk indexes and checksums: measured about 1 KiB per dataset; 2 KiB keeps a margin.
  return d.payload_bytes() + padding + text + datasets * 2048 + chunks * 64 + 65536;
}

void check_free_space(const std::string& dir, size_t bytes_needed) {
  size_t avail = free_bytes(dir);
  if (avail < bytes_needed)
    throw RuntimeError("not enough disk space for checkpoints in " + dir + ": a checkpoint needs " +
                       human_bytes(bytes_needed) + ", " + human_bytes(avail) + " available");
}

namespace {
using Clock = std::chrono::steady_clock;
double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

struct FileTimes {
  size_t bytes = 0;     // file size
  double data_ms = 0;   // HDF5 file created, every chunk checksummed and written, file closed
  double fsync_ms = 0;  // the final fsync (waits for the write-back still in flight)
};

// Writes the HDF5 file `path`: built in memory (see Stream), each checksummed chunk (fletcher32_copy:
// one pass over the payload; H5Dwrite_chunk, no filter pipeline) written to the file as soon as it is
// placed, then the metadata, then fsync. The HDF5 lock is released while checksumming, writing,
// sleeping and hinting write-back, so the dataset prefetch thread waits only for HDF5's memory copies.
// Throws H5Fail (errno text for disk errors); a partial file is left for the caller to remove.
FileTimes stream_file(const std::string& path, const CheckpointData& d, double delay_ms) {
  static std::atomic<uint64_t> counter{0};
  std::string index;
  Stream stream;
  stream.delay_ms = delay_ms;
  for (auto& [name, t] : d.tensors) {
    check_name(name, true);
    if (t.dtype() != DType::f32 || t.device() != Device::cpu)
      throw H5Fail("tensor " + name + " must be a host float32 tensor (is " + dtype_name(t.dtype()) + " on " +
                   device_name(t.device()) + ")");
    index += name + "\n";
    stream.total += chunked_bytes(std::vector<hsize_t>(t.shape().begin(), t.shape().end()), 4);
  }
  for (auto& [k, v] : d.ints) check_name(k, false);
  for (auto& [k, v] : d.floats) check_name(k, false);
  for (auto& [k, v] : d.strings) check_name(k, false), stream.total += chunked_bytes({v.size()}, 1);
  stream.total += chunked_bytes({index.size()}, 1) + (d.ints.size() + d.floats.size()) * 12;

  FileTimes ft;
  auto t0 = Clock::now();
  struct Fd {
    int fd;
    ~Fd() {
      if (fd >= 0) ::close(fd);
    }
  } file{::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
  if (file.fd < 0) throw H5Fail(std::string("create: ") + std::strerror(errno));
  stream.fd = file.fd;
  ImageCapture cap;  // outlives the file handles below: their destructors may release the buffer
  stream.cap = &cap;
  {
    H5Section section;  // HDF5 lock (released around checksums and disk writes) and quiet errors
    Hid fapl(h5(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate"), H5Pclose);
    // 1.10 format: checksummed superblock, object headers and chunk indexes.
    h5(H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_LATEST), "H5Pset_libver_bounds");
    // Small growth steps: the core driver zeroes each new step before HDF5 copies the chunk in, so
    // the zeroing hits cache lines that are written next instead of a 90 MB pass of its own (our
    // cached buffer makes the steps themselves free).
    size_t increment = size_t(1) << 20;
    h5(H5Pset_fapl_core(fapl, increment, false), "H5Pset_fapl_core");
    H5FD_file_image_callbacks_t cb{img_malloc, img_memcpy, img_realloc, img_free, img_udata_copy, img_udata_free, &cap};
    h5(H5Pset_file_image_callbacks(fapl, &cb), "H5Pset_file_image_callbacks");
    std::string mem_name =
        "hpctrain-checkpoint-image-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    Hid f(h5(H5Fcreate(mem_name.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl), "create in-memory file"), H5Fclose);
    Hid lcpl(h5(H5Pcreate(H5P_LINK_CREATE), "H5Pcreate"), H5Pclose);
    h5(H5Pset_create_intermediate_group(lcpl, 1), "H5Pset_create_intermediate_group");
    write_string_attr(f, "format", kFormat);
    write_int_attr(f, "version", kVersion);
    write_text(f, "meta/tensor_names", index, lcpl, &stream);
    for (auto& [name, t] : d.tensors) {
      std::vector<hsize_t> dims(t.shape().begin(), t.shape().end());
      write_dataset(f, name, H5T_NATIVE_FLOAT, H5T_IEEE_F32LE, dims, 4, t.raw(), lcpl, &stream);
      if (t.ndim() == 0) {
        Hid ds(h5(H5Dopen2(f, name.c_str(), H5P_DEFAULT), "reopen /" + name), H5Dclose);
        write_int_attr(ds, "scalar", 1);
      }
    }
    for (auto& [k, v] : d.ints)
      write_dataset(f, "ints/" + k, H5T_NATIVE_INT64, H5T_STD_I64LE, {1}, 8, &v, lcpl, &stream);
    for (auto& [k, v] : d.floats)
      write_dataset(f, "floats/" + k, H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE, {1}, 8, &v, lcpl, &stream);
    for (auto& [k, v] : d.strings) write_text(f, "strings/" + k, v, lcpl, &stream);
    lcpl.reset();
    fapl.reset();
    f.close_checked("close in-memory file");
  }
  if (!cap.closed || cap.in_use) throw H5Fail("HDF5 core driver returned no file image");
  const char* img = static_cast<const char*>(cap.closed);
  // Superblock v2/v3: version at byte 8, size of offsets at 9, end-of-file address at 28.
  const auto* p = reinterpret_cast<const unsigned char*>(img);
  if (std::memcmp(p, "\x89HDF\r\n\x1a\n", 8) != 0 || p[8] < 2 || p[9] != 8)
    throw H5Fail("unexpected superblock in the in-memory file image");
  uint64_t eof = 0;
  for (int i = 7; i >= 0; --i) eof = (eof << 8) | p[28 + i];
  if (eof > cap.buf.cap) throw H5Fail("HDF5 file image shorter than its end-of-file address");
  // Everything between the chunks already written: superblock, object headers, chunk indexes.
  std::sort(stream.written.begin(), stream.written.end());
  uint64_t at = 0;
  for (auto [addr, size] : stream.written) {
    if (addr < at || addr + size > eof) throw H5Fail("overlapping chunks in the HDF5 file image");
    if (addr > at) pwrite_all(file.fd, img + at, addr - at, at);
    at = addr + size;
  }
  if (eof > at) pwrite_all(file.fd, img + at, eof - at, at);
  stream.done = std::max(stream.done, stream.total);
  stream.maybe_sleep();  // test hook, if the chunks fell short of the estimate
  auto t1 = Clock::now();
  ft.data_ms = ms_between(t0, t1);
  if (::fsync(file.fd) != 0) throw H5Fail(std::string("fsync: ") + std::strerror(errno));
  int fd = file.fd;
  file.fd = -1;
  if (::close(fd) != 0) throw H5Fail(std::string("close: ") + std::strerror(errno));
  ft.bytes = static_cast<size_t>(eof);
  ft.fsync_ms = ms_between(t1, Clock::now());
  return ft;
}
}  // namespace

void write_checkpoint_file(const std::string& path, const CheckpointData& d, double delay_ms) {
  size_t need = checkpoint_expected_bytes(d);
  try {
    stream_file(path, d, delay_ms);
  } catch (const H5Fail& e) {
    throw RuntimeError("cannot write checkpoint " + path + " (" + human_bytes(need) + " needed, " +
                       human_bytes(free_bytes(fs::path(path).parent_path().string())) + " available): " + e.what());
  }
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
    Hid f = open_file(path);
    return read_string_attr(f, "format") == kFormat;
  } catch (...) {
    return false;
  }
}

CheckpointWriteResult write_checkpoint(const std::string& run_dir, int64_t step, const CheckpointData& d,
                                       const CheckpointWriteOptions& opt) {
  auto t0 = Clock::now();
  CheckpointWriteResult r;
  std::string dir = checkpoint_dir(run_dir);
  r.path = checkpoint_path(run_dir, step);
  size_t need = checkpoint_expected_bytes(d);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw RuntimeError("cannot create checkpoint directory " + dir + ": " + ec.message());
  if (::access(dir.c_str(), W_OK) != 0)
    throw RuntimeError("cannot write checkpoint " + r.path + " (" + human_bytes(need) +
                       " needed): directory is not writable: " + std::strerror(errno));
  if (opt.check_space) {
    size_t avail = free_bytes(dir);
    if (avail < need)
      throw RuntimeError("cannot write checkpoint " + r.path + ": disk full: " + human_bytes(need) + " needed, " +
                         human_bytes(avail) + " available in " + dir);
  }
  std::string tmp = r.path + ".tmp." + std::to_string(::getpid());
  Clock::time_point t_file, t_published;
  {
    try {
      FileTimes ft = stream_file(tmp, d, opt.test_delay_ms);
      r.data_ms = ft.data_ms;
      r.fsync_ms = ft.fsync_ms;
      t_file = Clock::now();
      if (::rename(tmp.c_str(), r.path.c_str()) != 0)
        throw H5Fail("rename " + tmp + " to " + r.path + ": " + std::strerror(errno));
      fsync_path(dir, true);
    } catch (const H5Fail& e) {
      ::unlink(tmp.c_str());
      throw RuntimeError("cannot write checkpoint " + r.path + " (" + human_bytes(need) + " needed, " +
                         human_bytes(free_bytes(dir)) + " available in " + dir + "): " + e.what());
    }
  }
  r.bytes = static_cast<size_t>(fs::file_size(r.path, ec));
  try {
    write_small_file_atomic((fs::path(run_dir) / "LATEST").string(),
                            "checkpoints/" + fs::path(r.path).filename().string() + "\n");
  } catch (const H5Fail& e) {
    // The checkpoint itself is complete and durable (readers scan by step), but say so loudly.
    throw RuntimeError("checkpoint " + r.path + " written, but LATEST could not be updated: " + e.what());
  }
  t_published = Clock::now();
  // Prune: keep the newest keep_last plus every keep_every-th; never the one just written.
  auto all = list_checkpoints(run_dir);
  size_t keep_from = all.size() > static_cast<size_t>(opt.keep_last) ? all.size() - static_cast<size_t>(opt.keep_last) : 0;
  for (size_t i = 0; i < keep_from; ++i) {
    auto& [s, p] = all[i];
    if (s == step || (opt.keep_every > 0 && s % opt.keep_every == 0)) continue;
    if (fs::remove(p, ec)) r.removed.push_back(p);
  }
  auto t_end = Clock::now();
  r.publish_ms = ms_between(t_file, t_published);
  r.prune_ms = ms_between(t_published, t_end);
  r.write_ms = ms_between(t0, t_end);
  return r;
}

std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& run_dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  for (auto it = fs::directory_iterator(checkpoint_dir(run_dir), ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    int64_t s = checkpoint_step_from_name(it->path().filename().string());
    if (s >= 0 && it->is_regular_file(ec)) out.emplace_back(s, it->path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> clean_temporary_files(const std::string& run_dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& d : {checkpoint_dir(run_dir), run_dir}) {
    std::vector<fs::path> victims;
    for (auto it = fs::directory_iterator(d, ec); !ec && it != fs::directory_iterator(); it.increment(ec))
      if (is_temporary_name(it->path().filename().string()) && it->is_regular_file(ec)) victims.push_back(it->path());
    for (auto& p : victims)
      if (fs::remove(p, ec)) removed.push_back(p.string());
  }
  return removed;
}

std::optional<LoadedCheckpoint> load_latest_checkpoint(const std::string& run_dir, bool quarantine,
                                                       const std::function<void(const std::string&)>& warn) {
  auto all = list_checkpoints(run_dir);
  LoadedCheckpoint out;
  std::vector<std::string> bad_paths;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      CheckpointData d = read_checkpoint_file(it->second);
      int64_t s = d.get_int("step", it->second);
      if (s != it->first)
        throw UsageError("checkpoint " + it->second + " is invalid: ints/step = " + std::to_string(s) +
                         " does not match the file name");
      out.path = it->second;
      out.data = std::move(d);
      break;
    } catch (const std::exception& e) {
      out.rejected.push_back(e.what());
      bad_paths.push_back(it->second);
      if (warn) warn(std::string(e.what()) + "; trying the previous checkpoint");
    }
  }
  if (out.path.empty()) return std::nullopt;
  if (quarantine) {
    std::error_code ec;
    for (auto& p : bad_paths) {
      fs::rename(p, p + ".bad", ec);
      if (warn && !ec) warn("moved the invalid checkpoint aside: " + p + ".bad");
    }
  }
  return out;
}

int inspect_checkpoint(const std::string& path) {
  std::error_code ec;
  auto size = fs::file_size(path, ec);
  std::cout << "checkpoint " << path << " (" << (ec ? std::string("?") : human_bytes(size)) << ")\n";
  try {
    CheckpointData d = read_checkpoint_file(path);
    auto geti = [&](const char* k) { return d.ints.count(k) ? std::to_string(d.ints.at(k)) : std::string("?"); };
    auto gets = [&](const char* k) { return d.strings.count(k) ? d.strings.at(k) : std::string("?"); };
    std::cout << "  format: " << kFormat << " version " << kVersion << "\n";
    std::cout << "  step: " << geti("step") << "  epoch: " << geti("epoch")
              << "  step_in_epoch: " << geti("step_in_epoch") << "\n";
    std::cout << "  world_size at save: " << geti("world_size") << "  global_batch: " << geti("global_batch")
              << "  seed: " << geti("seed") << "\n";
    std::cout << "  model: " << gets("model") << "  config_hash: " << gets("config_hash") << "\n";
    int64_t params = 0, nparam = 0, buffers = 0, momentum = 0;
    for (auto& [n, t] : d.tensors) {
      if (n.rfind("param/", 0) == 0) params += t.numel(), ++nparam;
      else if (n.rfind("buffer/", 0) == 0) buffers += t.numel();
      else if (n.rfind("momentum/", 0) == 0) momentum += t.numel();
    }
    std::cout << "  parameters: " << params << " in " << nparam << " tensors;  buffers: " << buffers
              << " values;  momentum: " << momentum << " values\n";
    for (auto& [k, v] : d.floats) std::cout << "  " << k << ": " << v << "\n";
    size_t ndatasets = d.tensors.size() + d.ints.size() + d.floats.size() + d.strings.size() + 1;
    std::cout << "  checksums: OK (" << ndatasets << " datasets read back, fletcher32 verified)\n";
    return kExitOk;
  } catch (const std::exception& e) {
    std::cout << "  checksums: FAILED: " << e.what() << "\n";
    return kExitUsage;
  }
}

}  // namespace ht
