#pragma once
// IDX files (LeCun's MNIST format, also Fashion-MNIST): big-endian header
// {0, 0, type, ndims, dim_0 .. dim_{ndims-1}} then the data. gzipped or plain: zlib's gzread reads
// both transparently.
#include <cstdint>
#include <string>
#include <vector>

namespace ht {

struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;  ///< row-major, prod(dims) bytes
};

/// Reads an unsigned-byte IDX file (type 0x08) with `ndims` dimensions. Throws UsageError naming the
/// file for a bad magic, type, dimension count, a short file or trailing bytes.
IdxArray read_idx_u8(const std::string& path, int ndims);

/// Writes an unsigned-byte IDX file, gzipped when `gzip` (test helper and a reference for the format).
void write_idx_u8(const std::string& path, const std::vector<int64_t>& dims, const std::vector<uint8_t>& data, bool gzip);

}  // namespace ht
