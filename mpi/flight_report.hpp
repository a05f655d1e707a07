#pragma once
// Lining up the ranks' flight records (mpi/flight_recorder.hpp) after a failure: `hpctrain inspect
// --flight RUN_DIR`. Waits are matched across ranks by name and occurrence (the k-th wait of a name
// on one rank is the k-th on every rank: ranks run the same program), not by time, so clocks that
// differ between nodes do not matter.
#include <string>

namespace ht {

/// A few lines on RUN_DIR/flight/rank-*.json: how many ranks left a record (and which did not), the
/// wait most ranks were stuck in (name, occurrence, step) with the ranks waiting in it and those that
/// never entered it, and for each of those (at most 8 named) its step, phase and its own latest wait.
/// Throws UsageError naming the directory when it holds no record, or the file and field when a
/// record cannot be read.
std::string flight_report(const std::string& run_dir);

}  // namespace ht
