#pragma once
// hpctrain doctor: the text report rank 0 prints (one table row per rank, rank 0's versions, the run
// directory, the allreduce checks, the problems with their fixes). Formatting only: no analysis.
#include <string>

#include "src/cli/doctor_report.hpp"

namespace ht {

/// The whole text report of `r` for a run on `device` (the "checking a GPU/CPU run" line), ending
/// in "No problems found." or the numbered problems. Needs at least one rank in r.ranks and the
/// binding plan for every rank.
std::string format_report(const DoctorReport& r, DoctorDevice device);

}  // namespace ht
