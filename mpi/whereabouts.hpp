#pragma once
// Where this rank is: its step, its phase and the collectives it waits in or last finished. A peer
// that probes this rank (mpi/peer_beacon.hpp) gets the text back in the answer, so when a collective
// waits past dist.timeout_s with every peer answering, the time-out message says which rank is
// elsewhere and doing what (a compute thread stuck in a kernel, a slow data phase) instead of only
// "one is slow". Lock-free: atomics written by the compute and communication threads, read by the
// beacon's answering thread.
#include <cstdint>
#include <exception>
#include <string>

namespace ht {

/// The optimizer step this rank is working on (1-based; the trainer, at the start of each step).
void note_step(int64_t step);
/// The phase this rank's compute thread is in ("data", "forward", "backward", "optimizer",
/// "checkpoint", "evaluate"): a string literal, kept by pointer.
void note_phase(const char* phase);
/// A wait on peers begins (CollectiveWait; `what` is its literal name) and ends; both are also
/// recorded by the flight recorder (mpi/flight_recorder.hpp). Any thread.
void note_collective_begin(const char* what);
/// `completed` false: the wait ended by an error (an exception leaving its scope), so its flight
/// record entry says "failed", not "done".
void note_collective_end(bool completed = true);

/// note_collective_begin/end as a scope, for waits on peers bounded elsewhere than by the watchdog
/// (the NCCL path polls under dist.timeout_s itself, mpi/gpu/nccl_communicator.cu), so they are in
/// the whereabouts and the flight record too.
class NotedWait {
 public:
  explicit NotedWait(const char* what) : unwinding_(std::uncaught_exceptions()) { note_collective_begin(what); }
  ~NotedWait() { note_collective_end(std::uncaught_exceptions() <= unwinding_); }
  NotedWait(const NotedWait&) = delete;
  NotedWait& operator=(const NotedWait&) = delete;

 private:
  int unwinding_;
};

/// The step and phase noted last (step 0 and phase null before the first).
struct Whereabouts {
  int64_t step = 0;
  const char* phase = nullptr;
};
Whereabouts whereabouts_now();

/// One line: "step 12, phase forward; in 1 collective, the latest #41 'agree_step_flags ...' for 4.2 s"
/// or "...; in no collective, the last #40 '...' finished 3.9 s ago" ("no step yet" before the first).
/// At most kWhereaboutsMax bytes. Any thread.
std::string whereabouts_text();
inline constexpr size_t kWhereaboutsMax = 300;

}  // namespace ht
