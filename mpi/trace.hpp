#pragma once
// Timeline tracing: every rank records spans (name, category, begin and duration in microseconds on a
// host clock aligned across ranks), and rank 0 merges them into one Chrome trace JSON (trace.json,
// "traceEvents" with ph "X", pid = rank, tid = thread), which Perfetto (ui.perfetto.dev) and
// chrome://tracing open. In CUDA builds each span is also an NVTX range for Nsight Systems.
//
// Cost when disabled: one predictable branch per span (TraceSpan checks enabled()). When enabled: two
// steady_clock reads and one vector append under a mutex (spans may come from the gradient thread).
//
// Usage (trainer):
//   Trace trace;                         // disabled
//   trace.enable(MPI_COMM_WORLD);        // collective: aligns clocks with rank 0
//   { TraceSpan s(trace, "forward"); ... }
//   { TraceSpan s(trace, "allreduce", "comm", bucket_index); ... }
//   trace.write(run_dir);                // collective: rank 0 writes run_dir/trace.json
#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "base/clock.hpp"
#include "mpi/whereabouts.hpp"

namespace ht {

class Trace {
 public:
  /// One finished span. Times in microseconds on this rank's clock shifted to rank 0's (see enable).
  struct Event {
    std::string name;
    const char* category;  ///< a string literal
    int64_t begin_us;
    int64_t dur_us;
    int tid;               ///< small per-process thread number (0 = first thread that recorded)
    int64_t index;         ///< optional argument (bucket number); -1 = none
  };

  Trace() = default;
  Trace(const Trace&) = delete;
  Trace& operator=(const Trace&) = delete;

  /// Turns recording on. Collective over `comm`: estimates this rank's clock offset to rank 0 by
  /// ping-pong (the round trip with the smallest delay of several wins, as in NTP), so timestamps of all
  /// ranks share rank 0's time axis to within half that round trip. Throws RuntimeError on MPI failure.
  void enable(MPI_Comm comm);
  /// Single-process variant (tests, one rank): no MPI calls.
  void enable_local();
  bool enabled() const { return enabled_; }

  /// Microseconds since rank 0's trace origin on the shared axis.
  int64_t now_us() const;
  /// A steady_clock time point (e.g. taken on another thread) on the same axis.
  int64_t to_trace_us(std::chrono::steady_clock::time_point t) const;
  /// Records a finished span (begin_us from now_us()). Thread-safe.
  void record(std::string name, const char* category, int64_t begin_us, int64_t end_us, int64_t index = -1);
  /// Names the calling thread in the trace ("main", "gradients", "prefetch").
  void set_thread_name(const std::string& name);

  /// Collective over the communicator given to enable(): gathers every rank's events to rank 0, which
  /// writes `dir`/trace.json (through a temporary file and a rename). No-op when disabled. Returns the
  /// number of events written (rank 0) or sent (others). Throws RuntimeError on I/O or MPI failure.
  size_t write(const std::string& dir, const std::string& filename = "trace.json");

  /// This rank's events so far (copy; tests).
  std::vector<Event> events() const;
  /// Estimated offset (µs) added to this rank's clock to get rank 0's; 0 on rank 0.
  int64_t clock_offset_us() const { return offset_us_; }
  /// Round trip (µs) of the ping that gave the offset; the offset is exact to within half of it. 0 for
  /// ranks on rank 0's host, which share its clock.
  int64_t clock_rtt_us() const { return rtt_us_; }
  /// Process label shown by Perfetto ("rank 3 (host)"); set by enable().
  void set_process_name(const std::string& name) { process_name_ = name; }

 private:
  static int64_t steady_us();
  int thread_id();
  std::string events_json(int pid) const;

  bool enabled_ = false;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int64_t origin_us_ = 0;   ///< rank 0's steady clock at enable, expressed on this rank's clock
  int64_t offset_us_ = 0;
  int64_t rtt_us_ = 0;
  std::string process_name_;
  mutable std::mutex mu_;
  std::vector<Event> events_;
  std::vector<std::pair<int, std::string>> thread_names_;
};

/// RAII span: records [construction, destruction) when the trace is enabled, plus an NVTX range in
/// CUDA builds. `name` must outlive the span only when it is a C string (it is copied at the end).
class TraceSpan {
 public:
  TraceSpan(Trace& t, const char* name, const char* category = "step", int64_t index = -1)
      : t_(t.enabled() ? &t : nullptr), name_(name), category_(category), index_(index) {
    if (t_) begin();
  }
  ~TraceSpan() {
    if (t_) end();
  }
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

 private:
  void begin();
  void end();
  Trace* t_;
  const char* name_;
  const char* category_;
  int64_t index_;
  int64_t begin_us_ = 0;
};

/// RAII phase of a step: adds its wall time to `ms` (milliseconds, steady clock), records it as a
/// trace span of the same extent and tells the peers' probes this rank's phase (`name`, a literal:
/// mpi/whereabouts.hpp); one object per phase keeps the step free of timer bookkeeping.
class PhaseTimer {
 public:
  PhaseTimer(Trace& t, const char* name, double& ms, const char* category = "step")
      : span_(t, name, category), ms_(&ms), t0_(SteadyClock::now()) {
    note_phase(name);
  }
  /// A phase whose time is recorded only in the trace (a checkpoint at a step boundary).
  PhaseTimer(Trace& t, const char* name) : span_(t, name, "step"), ms_(nullptr), t0_(SteadyClock::now()) {
    note_phase(name);
  }
  ~PhaseTimer() {  // before span_ ends: the span covers the whole phase
    if (ms_) *ms_ += ms_since(t0_);
  }
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

 private:
  TraceSpan span_;
  double* ms_;
  SteadyClock::time_point t0_;
};

}  // namespace ht
