#pragma once
// Human-readable byte counts for messages: binary units (KiB = 1024 B).
#include <cstdint>
#include <string>

namespace ht {

/// "512 B", "1.5 KiB", "12.0 MiB", "1.50 GiB" (two decimals from GiB up, one below).
std::string format_bytes(uint64_t bytes);

/// Always in GiB with one decimal ("79.6 GiB"), for tables whose rows must line up.
std::string format_gib(double bytes);

}  // namespace ht
