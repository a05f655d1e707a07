#include "cuda/binding_plan.hpp"

#include <map>
#include <set>
#include <sstream>

#include "base/error.hpp"

namespace ht {
namespace {

std::string join_ranks(const std::vector<int>& ranks) {
  std::ostringstream os;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i) os << (i + 1 == ranks.size() ? " and " : ", ");
    os << ranks[i];
  }
  return os.str();
}

}  // namespace

int choose_device(int local_rank, int visible_count) {
  if (visible_count <= 0 || local_rank < 0) return -1;
  return local_rank % visible_count;
}

BindingPlan plan_binding(const std::vector<RankGpus>& ranks) {
  BindingPlan plan;
  const int n = static_cast<int>(ranks.size());
  plan.local_rank.assign(n, 0);
  plan.device.assign(n, -1);
  plan.uuid.assign(n, "");
  // Group key: the node when known (a name no host can have), else the host name.
  auto group_of = [&](int r) {
    return ranks[r].node >= 0 ? "\x1fnode " + std::to_string(ranks[r].node) : ranks[r].host;
  };
  std::map<std::string, std::vector<int>> by_host;  // node or host -> ranks in rank order
  for (int r = 0; r < n; ++r) {
    auto& v = by_host[group_of(r)];
    plan.local_rank[r] = static_cast<int>(v.size());
    v.push_back(r);
  }
  std::vector<int> no_gpu;
  for (int r = 0; r < n; ++r) {
    const auto& vis = ranks[r].visible_uuids;
    plan.device[r] = choose_device(plan.local_rank[r], static_cast<int>(vis.size()));
    if (plan.device[r] >= 0) plan.uuid[r] = vis[plan.device[r]];
    else no_gpu.push_back(r);
  }
  if (!no_gpu.empty()) {
    BindingIssue is;
    is.kind = BindingIssue::Kind::kNoGpu;
    is.ranks = no_gpu;
    is.message = (no_gpu.size() == 1 ? "rank " : "ranks ") + join_ranks(no_gpu) + " see no GPU";
    is.fix = "see the GPU visibility problem reported for these ranks";
    plan.issues.push_back(is);
  }
  for (const auto& [group, rs] : by_host) {
    const std::string& host = ranks[rs.front()].host;  // the node's name in messages
    std::map<std::string, std::vector<int>> by_uuid;  // UUID -> ranks on this host that bind it
    std::set<std::string> distinct;                   // every GPU any rank on the host can see
    for (int r : rs) {
      for (const auto& u : ranks[r].visible_uuids) distinct.insert(u);
      if (!plan.uuid[r].empty()) by_uuid[plan.uuid[r]].push_back(r);
    }
    if (!distinct.empty() && distinct.size() < rs.size()) {
      BindingIssue is;
      is.kind = BindingIssue::Kind::kFewerGpusThanRanks;
      is.host = host;
      is.ranks = rs;
      std::ostringstream os;
      os << "host " << host << " runs " << rs.size() << " ranks but has only " << distinct.size()
         << " distinct GPU(s) visible";
      is.message = os.str();
      is.fix = "start one rank per GPU (mpirun --map-by ppr:" + std::to_string(distinct.size()) +
               ":node, srun --ntasks-per-node=" + std::to_string(distinct.size()) +
               " --gpus-per-task=1), or accept sharing with --dist.allow_shared_gpu (slower: gradients over MPI)";
      plan.issues.push_back(is);
    }
    for (const auto& [uuid, users] : by_uuid) {
      if (users.size() < 2) continue;
      BindingIssue is;
      is.kind = BindingIssue::Kind::kSharedGpu;
      is.host = host;
      is.ranks = users;
      is.uuid = uuid;
      is.message = "ranks " + join_ranks(users) + " on host " + host + (users.size() == 2 ? " would both bind GPU " : " would all bind GPU ") + uuid;
      is.fix = "give each rank its own GPU: do not set CUDA_VISIBLE_DEVICES to the same device for every rank "
               "(let hpctrain pick GPU local_rank, or use srun --gpus-per-task=1 --gpu-bind=single:1); "
               "or run with --dist.allow_shared_gpu to share on purpose (NCCL is then replaced by MPI)";
      plan.issues.push_back(is);
    }
  }
  return plan;
}

int bind_or_throw(const BindingPlan& plan, int rank, bool allow_shared_gpu) {
  for (const auto& is : plan.issues) {
    // Launch mistakes, seen alike by every rank: usage errors (exit 2 on every rank together).
    if (is.kind == BindingIssue::Kind::kNoGpu)
      throw UsageError("device binding: " + is.message + "; " + is.fix);
    if (is.kind == BindingIssue::Kind::kSharedGpu && !allow_shared_gpu)
      throw UsageError("device binding: " + is.message + "; fix: " + is.fix);
  }
  return plan.device.at(static_cast<size_t>(rank));
}

}  // namespace ht
