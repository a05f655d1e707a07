#pragma once
// Timing on the steady clock (monotonic: never jumps with the wall clock).
#include <chrono>

namespace ht {

/// Milliseconds elapsed on std::chrono::steady_clock since t0 (fractional).
inline double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace ht
