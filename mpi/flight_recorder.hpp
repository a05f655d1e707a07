#pragma once
// The flight recorder: every rank keeps a fixed-size record of its latest waits on peers (each
// CollectiveWait: gradient allreduces, agreements, broadcasts, start-up exchanges), with the step and
// phase it was in, when it began and whether it finished. On a collective time-out, a fatal error or
// a stop signal the rank writes it to RUN_DIR/flight/rank-RRRRR.json (atomically: a temporary file
// renamed), and `hpctrain inspect --flight RUN_DIR` (mpi/flight_report.hpp) lines the ranks' records
// up: which collective some ranks entered and others did not, what those others were doing, and
// which ranks left no record. docs/exit_codes.md "Flight records" describes the file.
//
// Recording costs one uncontended mutex and a few stores per wait (measured in
// results/cpu/flight_recorder.json); whereabouts.cpp records every note_collective_begin/end here.
#include <cstdint>
#include <string>
#include <vector>

namespace ht {

/// Entries kept: the latest kFlightEntries waits of this rank (older ones are overwritten).
inline constexpr int kFlightEntries = 256;

/// Wait `seq` (this rank's count of waits begun, from 1) began: `what` is its literal name, `step`
/// and `phase` where the compute thread was, `t` seconds on CLOCK_MONOTONIC. Any thread.
void flight_record_begin(uint64_t seq, const char* what, int64_t step, const char* phase, double t);
/// Wait `seq` ended at `t`, completed or by an error (no effect once its entry was overwritten).
/// Any thread.
void flight_record_end(uint64_t seq, double t, bool completed = true);

/// Where dumps go (RUN_DIR/flight/), and this rank's identity in them. Set by the trainer once the
/// run directory exists; until then flight_recorder_dump writes nothing.
void flight_recorder_set_dir(const std::string& run_dir, int rank, int world_size, const std::string& host);

/// A peer this rank found lost (no answer to a probe), with its host, for the record's `lost` list.
struct LostPeer {
  int rank = -1;
  std::string host;
};

/// Writes RUN_DIR/flight/rank-RRRRR.json: `reason`, the rank's whereabouts, the peers it found lost
/// (`lost`: what a relaunch leaves out, `hpctrain inspect --failed-hosts`) and its entries, oldest
/// first. Returns the path, or "" when no directory is set or the write failed (a dump must never
/// make a failing rank fail differently). Any thread; never throws.
std::string flight_recorder_dump(const std::string& reason, const std::vector<LostPeer>& lost = {}) noexcept;

/// Writes `text` to RUN_DIR/flight/NAME (a temporary file renamed), beside the records: a report
/// that belongs with them (NCCL's RAS status at a time-out). Returns the path, or "" when no
/// directory is set or the write failed. Any thread; never throws.
std::string flight_recorder_write(const std::string& name, const std::string& text) noexcept;

/// The command that lines up every rank's dump, for messages: "hpctrain inspect --flight RUN_DIR";
/// "" when no directory is set.
std::string flight_inspect_hint();

}  // namespace ht
