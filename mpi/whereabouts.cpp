#include "mpi/whereabouts.hpp"

#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdio>

#include "mpi/flight_recorder.hpp"

namespace ht {
namespace {

std::atomic<int64_t> g_step{0};
std::atomic<const char*> g_phase{nullptr};
std::atomic<uint64_t> g_seq{0};  // collectives begun on this rank
std::atomic<int> g_open{0};      // collectives in progress
std::atomic<uint64_t> g_latest_seq{0};
std::atomic<const char*> g_latest_what{nullptr};
std::atomic<double> g_latest_start{0};
std::atomic<uint64_t> g_done_seq{0};
std::atomic<const char*> g_done_what{nullptr};
std::atomic<double> g_done_at{0};
// The collectives this thread is in, innermost last (nested scopes: a start-up wait around others).
constexpr int kDepth = 8;
thread_local uint64_t t_seq[kDepth];
thread_local const char* t_what[kDepth];
thread_local int t_depth = 0;

double now_s() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

void note_step(int64_t step) { g_step.store(step, std::memory_order_relaxed); }
void note_phase(const char* phase) { g_phase.store(phase, std::memory_order_relaxed); }

void note_collective_begin(const char* what) {
  const uint64_t seq = g_seq.fetch_add(1) + 1;
  if (t_depth < kDepth) {
    t_seq[t_depth] = seq;
    t_what[t_depth] = what;
  }
  ++t_depth;
  const double t = now_s();
  g_latest_start.store(t);
  g_latest_what.store(what);
  g_latest_seq.store(seq);
  g_open.fetch_add(1);
  flight_record_begin(seq, what, g_step.load(std::memory_order_relaxed), g_phase.load(std::memory_order_relaxed), t);
}

void note_collective_end(bool completed) {
  if (t_depth <= 0) return;
  --t_depth;
  g_open.fetch_sub(1);
  const double t = now_s();
  g_done_at.store(t);
  if (t_depth < kDepth) {
    g_done_what.store(t_what[t_depth]);
    g_done_seq.store(t_seq[t_depth]);
    flight_record_end(t_seq[t_depth], t, completed);
  }
}

Whereabouts whereabouts_now() {
  return Whereabouts{g_step.load(std::memory_order_relaxed), g_phase.load(std::memory_order_relaxed)};
}

std::string whereabouts_text() {
  auto fmt = [](const char* f, auto... a) {
    char b[kWhereaboutsMax];
    const int n = std::snprintf(b, sizeof b, f, a...);
    return std::string(b, n < 0 ? 0 : std::min(static_cast<size_t>(n), sizeof b - 1));
  };
  const int64_t step = g_step.load(std::memory_order_relaxed);
  const char* phase = g_phase.load(std::memory_order_relaxed);
  std::string out = step > 0 ? fmt("step %lld, phase %s", static_cast<long long>(step), phase ? phase : "?")
                             : std::string("no step yet");
  const double t = now_s();
  if (const int open = g_open.load(); open > 0) {
    const char* what = g_latest_what.load();
    out += fmt("; in %d collective%s, the latest #%llu '%s' for %.1f s", open, open == 1 ? "" : "s",
               static_cast<unsigned long long>(g_latest_seq.load()), what ? what : "?", t - g_latest_start.load());
  } else if (const uint64_t done = g_done_seq.load(); done > 0) {
    const char* what = g_done_what.load();
    out += fmt("; in no collective, the last #%llu '%s' finished %.1f s ago", static_cast<unsigned long long>(done),
               what ? what : "?", t - g_done_at.load());
  } else {
    out += "; no collective yet";
  }
  if (out.size() > kWhereaboutsMax) out.resize(kWhereaboutsMax);
  return out;
}

}  // namespace ht
