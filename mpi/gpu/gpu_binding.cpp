// bind_rank_gpu: the collective half of device binding (the plan itself is cuda/binding_plan.cpp).
#include "mpi/gpu/gpu_binding.hpp"

#include "cuda/binding_plan.hpp"
#include "cuda/gpu_env.hpp"
#include "mpi/check.hpp"
#include "mpi/dist.hpp"

namespace ht {

int bind_rank_gpu(MPI_Comm comm, MPI_Comm local, const std::string& host, bool allow_shared_gpu, std::string* uuid) {
  int rank = 0;
  HT_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  // The node: the lowest rank (in `comm`) among the ranks sharing memory with this one.
  int node = rank;
  if (local != MPI_COMM_NULL) {
    // Bounded like every wait on peers: a peer dying here must not hang the others.
    CollectiveWait wait("bind_rank_gpu: the node's lowest rank (MPI_Allreduce on the node)");
    HT_MPI_CHECK(MPI_Allreduce(&rank, &node, 1, MPI_INT, MPI_MIN, local));
  }
  GpuEnv env = probe_gpu_env();
  GpuDiagnosis diag = diagnose_gpu_env(env);
  // One record per rank: node \x1f host \x1f status-ok \x1f diagnosis \x1f fix \x1f uuid \x1f uuid ...
  const char sep = '\x1f';
  std::string mine = std::to_string(node) + sep + host + sep + (diag.status == GpuStatus::kOk ? "1" : "0") + sep +
                     diag.summary + sep + diag.fix;
  for (const auto& d : env.devices) mine += sep + d.uuid;
  std::vector<RankGpus> ranks;
  std::string first_bad;
  for (const auto& rec : allgather_strings(comm, mine, "bind_rank_gpu: every rank's GPUs (UUIDs allgathered over MPI)")) {
    std::vector<std::string> f;
    size_t pos = 0;
    while (true) {
      size_t next = rec.find(sep, pos);
      f.push_back(rec.substr(pos, next == std::string::npos ? std::string::npos : next - pos));
      if (next == std::string::npos) break;
      pos = next + 1;
    }
    while (f.size() < 5) f.emplace_back();
    if (f[2] != "1" && first_bad.empty())
      first_bad = "rank " + std::to_string(ranks.size()) + " on " + f[1] + ": " + f[3] + "; fix: " + f[4];
    ranks.push_back(RankGpus{f[1], std::vector<std::string>(f.begin() + 5, f.end()), std::stoi(f[0])});
  }
  if (!first_bad.empty())
    throw UsageError("train.device = cuda but no usable GPU: " + first_bad +
                     " (hpctrain doctor diagnoses every rank; train.device = cpu runs without a GPU)");
  BindingPlan plan = plan_binding(ranks);
  int dev = bind_or_throw(plan, rank, allow_shared_gpu);
  if (uuid) *uuid = plan.uuid.at(static_cast<size_t>(rank));
  return dev;
}

int bind_job_rank_gpu(bool allow_shared_gpu) {
  return bind_rank_gpu(MPI_COMM_WORLD, dist().local, dist().host, allow_shared_gpu);
}

}  // namespace ht
