#pragma once
// Wall-clock helpers on the monotonic clock, for step timings and benchmarks.
#include <chrono>

namespace ht {

using SteadyClock = std::chrono::steady_clock;

/// Milliseconds elapsed since t0 (steady clock).
inline double ms_since(SteadyClock::time_point t0) {
  return std::chrono::duration<double, std::milli>(SteadyClock::now() - t0).count();
}

/// Seconds elapsed since t0 (steady clock).
inline double seconds_since(SteadyClock::time_point t0) {
  return std::chrono::duration<double>(SteadyClock::now() - t0).count();
}

}  // namespace ht
