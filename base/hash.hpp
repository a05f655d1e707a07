#pragma once
// FNV-1a, 64-bit (Fowler, Noll, Vo): a fast non-cryptographic hash for fingerprints that ranks
// compare (parameters, bucket plans, binaries) and for config hashes. Incremental: feed bytes in
// any number of calls; the result depends only on the byte sequence.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ht {

class Fnv1a {
 public:
  static constexpr uint64_t kOffset = 14695981039346656037ull;  // 0xcbf29ce484222325
  static constexpr uint64_t kPrime = 1099511628211ull;

  /// Mixes `n` bytes at `data`.
  void update(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) h_ = (h_ ^ p[i]) * kPrime;
  }
  void update(std::string_view s) { update(s.data(), s.size()); }
  /// Mixes the 8 bytes of v, least significant first (the same on every host of one job).
  void update_int(int64_t v) {
    for (int k = 0; k < 8; ++k) h_ = (h_ ^ ((static_cast<uint64_t>(v) >> (8 * k)) & 0xff)) * kPrime;
  }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = kOffset;
};

/// FNV-1a of a byte string.
inline uint64_t fnv1a(std::string_view s) {
  Fnv1a h;
  h.update(s);
  return h.value();
}

/// 16 lowercase hex digits of a 64-bit hash.
std::string hex64(uint64_t h);

}  // namespace ht
