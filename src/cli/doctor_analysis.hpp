#pragma once
// hpctrain doctor: the analysis. Pure functions of every rank's RankReport and the options (no
// environment, no MPI), so each problem kind is unit-tested with hand-made reports
// (tests/unit/test_doctor_analysis.cpp).
#include <vector>

#include "src/cli/doctor_report.hpp"

namespace ht {

/// The problems found across ranks and the device binding they imply.
struct Analysis {
  std::vector<Problem> problems;
  BindingPlan plan;  ///< per rank (indexed by position in the reports): local rank, device, UUID
};

/// Analyses all ranks' reports (indexed by rank, reports[i].rank == i), in this order: GPU visibility
/// (grouped by host and diagnosis; an error for DoctorDevice::cuda, else a warning), driver older than
/// the runtime within one major version (warning), binding (shared GPU, fewer GPUs than ranks on a
/// host: errors, warnings with allow_shared_gpu; only for a GPU run where some rank sees a GPU),
/// cuDNN and NCCL against the build and between ranks, MPI library and executable between ranks,
/// HDF5 against its headers and between ranks, then per host the run directory: HDF5 file locking on
/// a network file system, free space below min_free_gb GiB, not writable; across hosts, per host the
/// network: an interface-selection variable naming an interface the host lacks, no interface for
/// MPI's TCP transport (errors), several with nothing chosen (warning). Empty when all is well.
Analysis analyse(const std::vector<RankReport>& reports, const DoctorOptions& o);

/// Whether the NCCL allreduce check can run: GPUs are real (`real_gpus`: not faked), every rank binds
/// a GPU of its own (no binding issue) and hpctrain was built with NCCL (rank 0's report).
bool nccl_check_possible(const std::vector<RankReport>& reports, const BindingPlan& plan, bool real_gpus);

/// Problems from the allreduce checks: a wrong sum (either backend), and a failed NCCL allreduce
/// when `nccl_attempted` (a skipped one is not a problem).
std::vector<Problem> allreduce_problems(const std::vector<AllreduceResult>& results, bool nccl_attempted);

}  // namespace ht
