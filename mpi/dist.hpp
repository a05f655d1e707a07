#pragma once
// The distributed context: this process's rank, local_rank (rank among the ranks on its host, from
// MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)), world_size and host names, plus the small collective
// agreements every rank must make together (stop flags, error codes).
#include <mpi.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
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
double dist_max(double v);
inline long long dist_max(int v) { return dist_max(static_cast<long long>(v)); }
/// The sum of `v` over ranks.
double dist_sum(double v);
/// Waits until every rank has arrived (MPI_Barrier on MPI_COMM_WORLD), without a time limit while
/// every peer answers a probe (WaitKind::while_peers_answer). For the places where one rank does long
/// local work the others must not mistake for a failure (a checkpoint save); a peer that is lost
/// (dead, stopped, cut off) ends the rank within dist.timeout_s plus the guard's grace.
void dist_barrier(const char* what = "dist_barrier (MPI_Barrier, waiting for rank 0's checkpoint)");

/// The minimum and the maximum of `v` over ranks (two MPI_Allreduce), bounded. `what` names the wait
/// in a time-out message (a literal).
std::pair<uint64_t, uint64_t> dist_min_max(uint64_t v, const char* what);
/// Bitwise OR of `flags` over ranks (MPI_BOR allreduce), bounded unless `kind` says otherwise.
/// Returns `flags` unchanged where MPI is not running (before dist_init, after dist_finalize): a
/// single process agrees with itself.
uint32_t dist_bitwise_or(uint32_t flags, const char* what, WaitKind kind = WaitKind::bounded);
/// Every rank's string, indexed by rank (MPI_Allgather of the lengths, then MPI_Allgatherv).
std::vector<std::string> dist_allgather_strings(const std::string& mine, const char* what,
                                                WaitKind kind = WaitKind::bounded);
/// The same over `comm` (which need not be the world of dist_init): every rank of `comm` calls it.
/// Bounded by dist.timeout_s (a CollectiveWait named `what`). The one string allgather.
std::vector<std::string> allgather_strings(MPI_Comm comm, const std::string& mine, const char* what,
                                           WaitKind kind = WaitKind::bounded);
/// Rank 0's `bytes` to every rank (MPI_Bcast); `bytes` has the same size on every rank.
void dist_broadcast(std::vector<char>& bytes, const char* what, WaitKind kind = WaitKind::bounded);
/// Rank 0's values of `v` to every rank (T trivially copyable; v has the same size on every rank).
template <class T>
void dist_broadcast_values(std::vector<T>& v, const char* what, WaitKind kind = WaitKind::bounded) {
  static_assert(std::is_trivially_copyable_v<T>);
  std::vector<char> bytes(v.size() * sizeof(T));
  std::memcpy(bytes.data(), v.data(), bytes.size());
  dist_broadcast(bytes, what, kind);
  std::memcpy(v.data(), bytes.data(), bytes.size());
}
/// Every rank's `mine` (the same length on every rank) on rank 0, rank-major (MPI_Gather), bounded;
/// an empty vector on the other ranks.
std::vector<double> dist_gather_to_root(const std::vector<double>& mine, const char* what);

/// The first line of the MPI library's own version string (MPI_Get_library_version, callable before
/// MPI_Init, MPI-3.0 section 8.1.1); "unknown" where it fails.
std::string mpi_library_version();
/// The MPI this binary was compiled against ("Open MPI 4.1.4, MPI 3.1").
std::string mpi_build_version();

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
