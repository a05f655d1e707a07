// IDX reader/writer through zlib (gzopen reads plain files too).
#include "io/dataset/idx.hpp"

#include <zlib.h>

#include <cstdio>
#include <memory>

#include "base/error.hpp"

namespace ht {

namespace {
struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};
using Gz = std::unique_ptr<gzFile_s, GzCloser>;

// Reads exactly n bytes; returns the count read (less at end of file). Throws on a zlib error.
size_t gz_read_all(gzFile f, uint8_t* dst, size_t n, const std::string& path) {
  size_t got = 0;
  while (got < n) {
    unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - got, 1u << 30));
    int r = gzread(f, dst + got, chunk);
    if (r < 0) {
      int err = 0;
      const char* msg = gzerror(f, &err);
      throw UsageError(path + ": read error (" + std::string(msg ? msg : "zlib error") + "; corrupt gzip data?)");
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return got;
}
}  // namespace

IdxArray read_idx_u8(const std::string& path, int ndims) {
  Gz f(gzopen(path.c_str(), "rb"));
  if (!f) throw UsageError(path + ": cannot open IDX file");
  gzbuffer(f.get(), 1 << 20);
  uint8_t head[4];
  if (gz_read_all(f.get(), head, 4, path) != 4) throw UsageError(path + ": IDX file too short for its 4-byte magic");
  if (head[0] != 0 || head[1] != 0)
    throw UsageError(path + ": bad IDX magic " + std::to_string(head[0]) + "," + std::to_string(head[1]) +
                     " (expected 0,0: not an IDX file)");
  if (head[2] != 0x08)
    {
    char t[8];
    std::snprintf(t, sizeof t, "0x%02x", head[2]);
    throw UsageError(path + ": IDX data type " + t + ", expected 0x08 (unsigned byte)");
  }
  if (head[3] != ndims)
    throw UsageError(path + ": IDX file has " + std::to_string(head[3]) + " dimensions, expected " + std::to_string(ndims));
  IdxArray a;
  int64_t total = 1;
  for (int i = 0; i < ndims; ++i) {
    uint8_t b[4];
    if (gz_read_all(f.get(), b, 4, path) != 4) throw UsageError(path + ": IDX header truncated in dimension " + std::to_string(i));
    int64_t d = (int64_t{b[0]} << 24) | (int64_t{b[1]} << 16) | (int64_t{b[2]} << 8) | b[3];
    if (d <= 0 || d > (int64_t{1} << 31)) throw UsageError(path + ": IDX dimension " + std::to_string(i) + " = " + std::to_string(d));
    a.dims.push_back(d);
    total *= d;
    if (total > (int64_t{1} << 36)) throw UsageError(path + ": IDX dimensions too large");
  }
  a.data.resize(static_cast<size_t>(total));
  size_t got = gz_read_all(f.get(), a.data.data(), a.data.size(), path);
  if (got != a.data.size())
    throw UsageError(path + ": IDX data truncated: " + std::to_string(got) + " of " + std::to_string(total) +
                     " bytes present");
  uint8_t extra;
  if (gz_read_all(f.get(), &extra, 1, path) != 0)
    throw UsageError(path + ": IDX file has bytes after the " + std::to_string(total) + " the header declares");
  return a;
}

void write_idx_u8(const std::string& path, const std::vector<int64_t>& dims, const std::vector<uint8_t>& data, bool gzip) {
  std::vector<uint8_t> buf = {0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  for (int64_t d : dims)
    for (int s = 24; s >= 0; s -= 8) buf.push_back(static_cast<uint8_t>((d >> s) & 0xFF));
  buf.insert(buf.end(), data.begin(), data.end());
  Gz f(gzopen(path.c_str(), gzip ? "wb6" : "wbT"));  // "T": plain (transparent) write
  if (!f) throw RuntimeError(path + ": cannot create IDX file");
  if (gzwrite(f.get(), buf.data(), static_cast<unsigned>(buf.size())) != static_cast<int>(buf.size()))
    throw RuntimeError(path + ": write failed");
}

}  // namespace ht
