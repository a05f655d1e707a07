#pragma once
// Byte counts for people: "512 B", "1.5 KiB", "12.0 MiB", "1.50 GiB" (powers of 1024).
#include <cstdint>
#include <cstdio>
#include <string>

namespace ht {

/// `bytes` in the largest unit it reaches: B (exact), KiB and MiB (one decimal), GiB (two decimals).
inline std::string format_bytes(uint64_t bytes) {
  char buf[64];
  const double b = static_cast<double>(bytes);
  if (bytes >= (uint64_t{1} << 30)) std::snprintf(buf, sizeof(buf), "%.2f GiB", b / double(uint64_t{1} << 30));
  else if (bytes >= (uint64_t{1} << 20)) std::snprintf(buf, sizeof(buf), "%.1f MiB", b / double(uint64_t{1} << 20));
  else if (bytes >= (uint64_t{1} << 10)) std::snprintf(buf, sizeof(buf), "%.1f KiB", b / double(uint64_t{1} << 10));
  else std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(bytes));
  return buf;
}

}  // namespace ht
