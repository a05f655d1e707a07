#pragma once
// Error types and exit codes (docs/exit_codes.md). Code throws; the CLI maps the exception type
// to the exit code and makes every rank exit with it.
#include <exception>
#include <stdexcept>
#include <string>

namespace ht {

/// Exit codes shared by every subcommand.
enum ExitCode : int {
  kExitOk = 0,
  kExitRuntime = 1,    ///< runtime failure: names rank, step and cause
  kExitUsage = 2,      ///< invalid usage, config, dataset or checkpoint: names file, field, value
  kExitBudget = 3,     ///< stopped before crossing run.max_hours / max_gpu_hours / max_cost, checkpoint saved
  kExitSlowRank = 4,   ///< stopped after a checkpoint: one rank judged slow too long (watchdog.slow_rank_stop_windows)
  kExitStopped = 75,   ///< EX_TEMPFAIL: stopped by a signal after saving a checkpoint; rerun to resume
};

/// Invalid usage, config, dataset or checkpoint (exit code 2). The message must name the file,
/// the field and the offending value.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A UsageError raised on every rank together after an agreement (see collective_usage_check in
/// mpi/dist.hpp), so the job exits with code 2 cleanly instead of through MPI_Abort. `reported` is
/// false on ranks that only follow another rank's error (they print nothing of their own).
class CollectiveUsageError : public UsageError {
 public:
  CollectiveUsageError(const std::string& msg, bool reported_here) : UsageError(msg), reported(reported_here) {}
  bool reported;
};

/// Failure while running (exit code 1): I/O, a library call, a non-finite loss beyond the limit.
class RuntimeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The exit code of a command's failure `e` (kExitUsage for a UsageError, kExitRuntime for any other
/// exception) with its message in `message`; for a `catch (...)` that turns a failure into an exit code.
int exit_code_of(const std::exception_ptr& e, std::string& message);

}  // namespace ht
