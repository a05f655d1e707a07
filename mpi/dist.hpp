#pragma once
// The distributed context: this process's rank, local_rank (rank among the ranks on its host, from
// MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)), world_size and host names, plus the small collective
// agreements every rank must make together (stop flags, error codes).
#include <mpi.h>

#include <string>

#include <vector>

#include "mpi/collective_guard.hpp"
#include "base/error.hpp"

namespace ht {

struct DistContext {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;   ///< rank among the ranks on this host
  int local_size = 1;   ///< ranks on this host
  std::string host;
  std::vector<std::string> hosts;  ///< host of every rank, indexed by rank
  MPI_Comm world = MPI_COMM_WORLD;
  MPI_Comm local = MPI_COMM_NULL;  ///< ranks sharing this host
};

/// Initialises MPI (MPI_THREAD_MULTIPLE: the gradient-exchange thread calls MPI while the main
/// thread computes) and fills the context. Safe to call once per process.
void dist_init(int* argc, char*** argv);
/// The context; valid after dist_init.
const DistContext& dist();
/// MPI_Finalize if initialised and not finalised (after stopping the probe responder). With the
/// collective guard running it is bounded by the time limit: a lost peer ends the rank with `code`.
void dist_finalize(int code = 0);
/// Seconds dist_abort gives MPI_Abort before the rank ends itself.
constexpr double kAbortGraceS = 5.0;
/// Ends the whole job: MPI_Abort(MPI_COMM_WORLD, code) so every rank exits (no hang); MPI_Abort can
/// block on a broken job, so the rank _exits with `code` after kAbortGraceS at the latest.
[[noreturn]] void dist_abort(int code);

/// True on every rank if `flag` is true on any rank (MPI_LOR allreduce). Every dist_* agreement is a
/// CollectiveWait (mpi/collective_guard.hpp): bounded by dist.timeout_s unless `kind` says otherwise.
bool dist_any(bool flag, WaitKind kind = WaitKind::bounded);
/// The maximum of `v` over ranks.
long long dist_max(long long v);
/// The sum of `v` over ranks.
double dist_sum(double v);
/// Waits until every rank has arrived (MPI_Barrier on MPI_COMM_WORLD), without a time limit while
/// every peer answers a probe (WaitKind::while_peers_answer). For the places where one rank does long
/// local work the others must not mistake for a failure (a checkpoint save); a peer that is lost
/// (dead, stopped, cut off) ends the rank within dist.timeout_s plus the guard's grace.
void dist_barrier();

/// Runs `f` (local work, no collectives inside) on every rank; if it throws UsageError on any rank,
/// every rank throws CollectiveUsageError together, carrying its own message where it failed. Used
/// where all ranks validate the same inputs (config, dataset shards) so all exit 2 with the message.
template <class F> void collective_usage_check(F&& f) {
  std::string err;
  bool failed = false;
  try {
    f();
  } catch (const UsageError& e) {
    err = e.what();
    failed = true;
  }
  // Local work takes each rank its own time (loading data, waiting for the run lock): no time limit
  // while every peer answers.
  if (dist_any(failed, WaitKind::while_peers_answer)) throw CollectiveUsageError(failed ? err : "stopping: another rank reported an error", failed);
}

}  // namespace ht
