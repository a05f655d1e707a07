#pragma once
// Lining up the ranks' flight records (mpi/flight_recorder.hpp) after a failure: `hpctrain inspect
// --flight RUN_DIR`. Waits are matched across ranks by name and occurrence (the k-th wait of a name
// on one rank is the k-th on every rank: ranks run the same program), not by time, so clocks that
// differ between nodes do not matter.
#include <string>
#include <vector>

namespace ht {

/// A few lines on RUN_DIR/flight/rank-*.json: how many ranks left a record (and which did not), the
/// wait most ranks were stuck in (name, occurrence, step) with the ranks waiting in it and those that
/// never entered it, and for each of those (at most 8 named) its step, phase and its own latest wait.
/// Throws UsageError naming the directory when it holds no record, or the file and field when a
/// record cannot be read.
std::string flight_report(const std::string& run_dir);

/// A host that the latest start of a run named as failed, and why.
struct FailedHost {
  std::string host, cause;
};

/// The hosts a relaunch should leave out, from what the latest start of the run in RUN_DIR wrote:
/// the peers its ranks found lost (the flight records' `lost` lists: no answer to a probe); when none
/// was and every record was written on a stop signal (the launcher ended the job), the hosts of ranks
/// that left no record (the latest run_start's hosts);
/// and the
/// host of the rank judged slow when the run stopped by watchdog.slow_rank_stop_windows (run_end
/// status `slow_rank` in metrics.jsonl, the host of the latest `slow_rank` warning). In order of first
/// mention, each host once. Empty when nothing names a host. Throws UsageError when RUN_DIR is not a
/// directory, or naming the file and field when a record or metrics line cannot be read. Reads files only (slurm/train.sbatch's restart).
std::vector<FailedHost> failed_hosts(const std::string& run_dir);

}  // namespace ht
