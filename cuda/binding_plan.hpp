#pragma once
// Device binding: which GPU each rank drives, and the checks that go with it (docs/gpu.md:
// rank r binds GPU local_rank among the visible ones; two ranks on one GPU is an error). Pure logic
// over every rank's (host, visible GPU UUIDs): the caller gathers those over MPI (e.g. MPI_Allgather)
// and every rank computes the same plan, so all ranks agree on errors without another collective.
#include <string>
#include <vector>

namespace ht {

/// What one rank sees: its host and the UUIDs of its visible GPUs, in CUDA ordinal order.
struct RankGpus {
  std::string host;
  std::vector<std::string> visible_uuids;
  /// The node the rank runs on, as MPI sees it: the lowest rank of its shared-memory communicator
  /// (MPI_Comm_split_type MPI_COMM_TYPE_SHARED, mpi/dist.cpp). Ranks are grouped by node when it is
  /// set (>= 0), so host name aliases of one node, or equal names of different nodes (containers),
  /// do not change the binding; -1 groups by host name (the doctor, tests).
  int node = -1;
};

/// The index (CUDA ordinal among the visible devices) that the rank with `local_rank` binds, or -1 when
/// no GPU is visible. With at least as many visible GPUs as ranks on the host, GPU local_rank; with
/// fewer (for example Slurm --gpus-per-task=1, where each rank sees exactly its own GPU), local_rank
/// modulo the visible count, and the UUID check below tells a per-rank binding from real sharing.
int choose_device(int local_rank, int visible_count);

/// A problem with the binding as a whole.
struct BindingIssue {
  enum class Kind {
    kSharedGpu,          ///< two or more ranks bind the same GPU (same UUID on one host)
    kFewerGpusThanRanks, ///< a host has fewer distinct GPUs than ranks
    kNoGpu,              ///< a rank sees no GPU at all
  };
  Kind kind;
  std::string host;
  std::vector<int> ranks;   ///< the ranks concerned (global ranks)
  std::string uuid;         ///< the shared GPU (kSharedGpu)
  std::string message;      ///< one line naming host, ranks and GPU
  std::string fix;          ///< the likely fix
};

/// The binding of every rank plus the issues found.
struct BindingPlan {
  std::vector<int> local_rank;       ///< per rank: its rank among the ranks on its host (rank order)
  std::vector<int> device;           ///< per rank: chosen ordinal, -1 when none
  std::vector<std::string> uuid;     ///< per rank: the UUID of the chosen GPU, "" when none
  std::vector<BindingIssue> issues;
};

/// Computes the plan for all ranks (indexed by global rank). local_rank is each rank's position among
/// the ranks of its node (RankGpus::node, else the same host name), in rank order (what
/// MPI_Comm_split_type with key = rank gives). Issues name a node by the host of its first rank.
BindingPlan plan_binding(const std::vector<RankGpus>& ranks);

/// Throws UsageError (exit 2: a launch mistake) for the binding issues that forbid training on
/// `rank`'s device: a shared GPU (naming both ranks and the GPU) unless allow_shared_gpu, and no
/// visible GPU on any rank. Returns the ordinal `rank` binds. Every rank gets the same verdict from
/// the same inputs, so the trainer's collective usage check ends every rank together.
int bind_or_throw(const BindingPlan& plan, int rank, bool allow_shared_gpu);

}  // namespace ht
