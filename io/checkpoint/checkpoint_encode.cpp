// The streaming checkpoint writer (io/checkpoint/checkpoint_format.hpp): HDF5 builds the file in memory (core
// driver, io/checkpoint/checkpoint_image.hpp) and every checksummed chunk goes to the file with our own pwrite
// as soon as HDF5 has placed it; the metadata between the chunks follows after close, then fsync.
#include <fcntl.h>
#include <hdf5.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <thread>

#include "io/checkpoint/checkpoint_format.hpp"
#include "io/checkpoint/checkpoint_image.hpp"
#include "io/fletcher32.hpp"
#include "io/h5.hpp"
#include "base/error.hpp"
#include "base/test_faults.hpp"

namespace fs = std::filesystem;

namespace ht {
namespace {

constexpr size_t kChunkBytes = size_t(1) << 20;  // ~1 MiB chunks: one checksum each, fits the chunk cache
const char* const kReserved[] = {"meta", "ints", "floats", "strings"};

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

// Rows of dimension 0 per chunk: about kChunkBytes per chunk, spread evenly so the padded edge chunk
// (HDF5 stores edge chunks whole) wastes less than one row per chunk.
hsize_t chunk_rows(hsize_t rows, size_t row_bytes) {
  if (rows == 0) return 1;
  size_t total = static_cast<size_t>(rows) * std::max<size_t>(row_bytes, 1);
  hsize_t nchunks = (total + kChunkBytes - 1) / kChunkBytes;
  nchunks = std::clamp<hsize_t>(nchunks, 1, rows);
  return (rows + nchunks - 1) / nchunks;
}

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
  H5Handle space(h5(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), maxdims.data()), "H5Screate_simple " + name),
                 H5Sclose);
  H5Handle dcpl(h5(H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate"), H5Pclose);
  h5(H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data()), "H5Pset_chunk " + name);
  h5(H5Pset_fletcher32(dcpl), "H5Pset_fletcher32 " + name);
  H5Handle ds(h5(H5Dcreate2(loc, name.c_str(), filetype, space, lcpl, dcpl, H5P_DEFAULT), "create dataset /" + name),
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
  H5Handle type(h5(H5Tcopy(H5T_C_S1), "H5Tcopy"), H5Tclose);
  h5(H5Tset_size(type, std::max<size_t>(v.size(), 1)), "H5Tset_size");
  h5(H5Tset_strpad(type, H5T_STR_NULLPAD), "H5Tset_strpad");
  H5Handle space(h5(H5Screate(H5S_SCALAR), "H5Screate"), H5Sclose);
  H5Handle a(h5(H5Acreate2(loc, name, type, space, H5P_DEFAULT, H5P_DEFAULT), std::string("create attribute ") + name),
             H5Aclose);
  h5(H5Awrite(a, type, v.c_str()), std::string("write attribute ") + name);
}

void write_int_attr(hid_t loc, const char* name, int64_t v) {
  H5Handle space(h5(H5Screate(H5S_SCALAR), "H5Screate"), H5Sclose);
  H5Handle a(h5(H5Acreate2(loc, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT), std::string("create attribute ") + name),
             H5Aclose);
  h5(H5Awrite(a, H5T_NATIVE_INT64, &v), std::string("write attribute ") + name);
}

using Clock = std::chrono::steady_clock;
double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Every group of the file, parents first, created with all its links kept compact: in the object
// header, which the 1.10 format checksums. HDF5's default moves a group past 8 links into "dense"
// storage (a fractal heap and a B-tree), whose blocks HDF5 1.10 does not checksum and whose damaged
// bytes crash its parser (the mutation run: H5Lget_name_by_idx on a corrupted heap block).
void create_compact_groups(hid_t f, const CheckpointData& d) {
  std::set<std::string> groups = {"meta"};
  auto add_parents = [&](const std::string& name) {
    for (size_t at = name.find('/'); at != std::string::npos; at = name.find('/', at + 1)) groups.insert(name.substr(0, at));
  };
  for (const auto& kv : d.tensors) add_parents(kv.first);
  if (!d.ints.empty()) groups.insert("ints");
  if (!d.floats.empty()) groups.insert("floats");
  if (!d.strings.empty()) groups.insert("strings");
  H5Handle gcpl(h5(H5Pcreate(H5P_GROUP_CREATE), "H5Pcreate"), H5Pclose);
  // Up to 65535 links compact (HDF5's maximum); a checkpoint group holds a few hundred at most.
  h5(H5Pset_link_phase_change(gcpl, 65535, 65534), "H5Pset_link_phase_change");
  for (const auto& g : groups)  // std::set: "param" sorts before "param/x", parents first
    H5Handle(h5(H5Gcreate2(f, g.c_str(), H5P_DEFAULT, gcpl, H5P_DEFAULT), "create group /" + g), H5Gclose);
}

// Writes the HDF5 file `path`: built in memory (see Stream), each checksummed chunk (fletcher32_copy:
// one pass over the payload; H5Dwrite_chunk, no filter pipeline) written to the file as soon as it is
// placed, then the metadata, then fsync. The HDF5 lock is released while checksumming, writing,
// sleeping and hinting write-back, so the dataset prefetch thread waits only for HDF5's memory copies.
// Throws H5Fail (errno text for disk errors); a partial file is left for the caller to remove.
CheckpointFileTimes stream_file(const std::string& path, const CheckpointData& d, double delay_ms) {
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

  CheckpointFileTimes ft;
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
    H5Handle fapl(h5(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate"), H5Pclose);
    // 1.10 format: checksummed superblock, object headers and chunk indexes.
    h5(H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_LATEST), "H5Pset_libver_bounds");
    // Small growth steps: the core driver zeroes each new step before HDF5 copies the chunk in, so
    // the zeroing hits cache lines that are written next instead of a 90 MB pass of its own (our
    // cached buffer makes the steps themselves free).
    size_t increment = size_t(1) << 20;
    h5(H5Pset_fapl_core(fapl, increment, false), "H5Pset_fapl_core");
    cap.install(fapl);
    std::string mem_name =
        "hpctrain-checkpoint-image-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    H5Handle f(h5(H5Fcreate(mem_name.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl), "create in-memory file"), H5Fclose);
    H5Handle lcpl(h5(H5Pcreate(H5P_LINK_CREATE), "H5Pcreate"), H5Pclose);
    h5(H5Pset_create_intermediate_group(lcpl, 1), "H5Pset_create_intermediate_group");
    write_string_attr(f, "format", kCheckpointFormat);
    write_int_attr(f, "version", checkpoint_version_for(d));
    create_compact_groups(f, d);
    write_text(f, "meta/tensor_names", index, lcpl, &stream);
    for (auto& [name, t] : d.tensors) {
      std::vector<hsize_t> dims(t.shape().begin(), t.shape().end());
      write_dataset(f, name, H5T_NATIVE_FLOAT, H5T_IEEE_F32LE, dims, 4, t.raw(), lcpl, &stream);
      if (t.ndim() == 0) {
        H5Handle ds(h5(H5Dopen2(f, name.c_str(), H5P_DEFAULT), "reopen /" + name), H5Dclose);
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

CheckpointFileTimes stream_checkpoint_file(const std::string& path, const CheckpointData& d) {
  return stream_file(path, d, TestFaults::get().number("ckpt_write_delay_ms", 0));
}

void write_checkpoint_file(const std::string& path, const CheckpointData& d) {
  size_t need = checkpoint_expected_bytes(d);
  try {
    stream_checkpoint_file(path, d);
  } catch (const H5Fail& e) {
    throw RuntimeError("cannot write checkpoint " + path + " (" + checkpoint_size_text(need) + " needed, " +
                       checkpoint_size_text(available_bytes(fs::path(path).parent_path().string())) + " available): " +
                       e.what());
  }
}

std::string checkpoint_size_text(size_t b) {
  char buf[64];
  if (b >= (size_t(1) << 20)) std::snprintf(buf, sizeof buf, "%zu bytes (%.1f MiB)", b, b / 1048576.0);
  else std::snprintf(buf, sizeof buf, "%zu bytes", b);
  return buf;
}

size_t available_bytes(const std::string& dir) {
  struct statvfs s {};
  if (::statvfs(dir.c_str(), &s) != 0) return SIZE_MAX;
  return static_cast<size_t>(s.f_bavail) * static_cast<size_t>(s.f_frsize);
}

}  // namespace ht
