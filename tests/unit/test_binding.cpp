// Device binding logic (cuda/binding_plan.hpp) with made-up UUID lists: which GPU each rank binds, and the
// errors for shared GPUs and hosts with fewer GPUs than ranks.
#include <catch2/catch.hpp>

#include "cuda/binding_plan.hpp"
#include "base/error.hpp"

using namespace ht;

namespace {
bool has(const BindingPlan& p, BindingIssue::Kind k) {
  for (const auto& is : p.issues)
    if (is.kind == k) return true;
  return false;
}
const BindingIssue& get(const BindingPlan& p, BindingIssue::Kind k) {
  for (const auto& is : p.issues)
    if (is.kind == k) return is;
  FAIL("issue not found");
  return p.issues.front();
}
}  // namespace

TEST_CASE("binding: choose_device", "[binding]") {
  CHECK(choose_device(0, 4) == 0);
  CHECK(choose_device(3, 4) == 3);
  CHECK(choose_device(1, 1) == 0);  // one visible GPU per rank (srun --gpus-per-task=1)
  CHECK(choose_device(5, 4) == 1);
  CHECK(choose_device(0, 0) == -1);
}

TEST_CASE("binding: one rank per GPU on two hosts is clean", "[binding]") {
  std::vector<std::string> gpus_a = {"GPU-a0", "GPU-a1"}, gpus_b = {"GPU-b0", "GPU-b1"};
  std::vector<RankGpus> ranks = {{"a", gpus_a}, {"a", gpus_a}, {"b", gpus_b}, {"b", gpus_b}};
  BindingPlan p = plan_binding(ranks);
  CHECK(p.issues.empty());
  CHECK(p.local_rank == std::vector<int>{0, 1, 0, 1});
  CHECK(p.device == std::vector<int>{0, 1, 0, 1});
  CHECK(p.uuid == std::vector<std::string>{"GPU-a0", "GPU-a1", "GPU-b0", "GPU-b1"});
  CHECK(bind_or_throw(p, 3, false) == 1);
}

TEST_CASE("binding: per-task visibility (each rank sees only its own GPU) is clean", "[binding]") {
  std::vector<RankGpus> ranks = {{"a", {"GPU-a0"}}, {"a", {"GPU-a1"}}};
  BindingPlan p = plan_binding(ranks);
  CHECK(p.issues.empty());
  CHECK(p.device == std::vector<int>{0, 0});
  CHECK(p.uuid == std::vector<std::string>{"GPU-a0", "GPU-a1"});
}

TEST_CASE("binding: two ranks on one GPU name both ranks and the GPU", "[binding]") {
  // CUDA_VISIBLE_DEVICES=0 given to every rank: each sees one GPU, the same one.
  std::vector<RankGpus> ranks = {{"n1", {"GPU-aaa"}}, {"n1", {"GPU-aaa"}}, {"n2", {"GPU-b"}}};
  BindingPlan p = plan_binding(ranks);
  REQUIRE(has(p, BindingIssue::Kind::kSharedGpu));
  const auto& is = get(p, BindingIssue::Kind::kSharedGpu);
  CHECK(is.ranks == std::vector<int>{0, 1});
  CHECK(is.uuid == "GPU-aaa");
  CHECK(is.host == "n1");
  CHECK_THAT(is.message, Catch::Contains("ranks 0 and 1") && Catch::Contains("GPU-aaa") && Catch::Contains("n1"));
  CHECK(has(p, BindingIssue::Kind::kFewerGpusThanRanks));
  CHECK(get(p, BindingIssue::Kind::kFewerGpusThanRanks).host == "n1");
  CHECK_THROWS_WITH(bind_or_throw(p, 0, false), Catch::Contains("ranks 0 and 1") && Catch::Contains("GPU-aaa"));
  CHECK_THROWS_AS(bind_or_throw(p, 2, false), UsageError);  // every rank gets the same verdict (exit 2)
  CHECK(bind_or_throw(p, 1, true) == 0);                         // allowed on purpose
}

TEST_CASE("binding: a duplicated UUID in the visible list is sharing too", "[binding]") {
  std::vector<std::string> dup = {"GPU-aaa", "GPU-aaa"};
  BindingPlan p = plan_binding({{"h", dup}, {"h", dup}});
  CHECK(p.device == std::vector<int>{0, 1});
  CHECK(has(p, BindingIssue::Kind::kSharedGpu));
}

TEST_CASE("binding: fewer GPUs than ranks on a host", "[binding]") {
  std::vector<std::string> two = {"GPU-0", "GPU-1"};
  BindingPlan p = plan_binding({{"h", two}, {"h", two}, {"h", two}});
  REQUIRE(has(p, BindingIssue::Kind::kFewerGpusThanRanks));
  const auto& is = get(p, BindingIssue::Kind::kFewerGpusThanRanks);
  CHECK_THAT(is.message, Catch::Contains("3 ranks") && Catch::Contains("2 distinct"));
  CHECK_THAT(is.fix, Catch::Contains("ppr:2:node"));
  CHECK(p.device == std::vector<int>{0, 1, 0});
  CHECK(get(p, BindingIssue::Kind::kSharedGpu).ranks == std::vector<int>{0, 2});
}

TEST_CASE("binding: no GPU on a rank is an error for binding", "[binding]") {
  BindingPlan p = plan_binding({{"h", {"GPU-0"}}, {"g", {}}});
  CHECK(p.device == std::vector<int>{0, -1});
  REQUIRE(has(p, BindingIssue::Kind::kNoGpu));
  CHECK(get(p, BindingIssue::Kind::kNoGpu).ranks == std::vector<int>{1});
  CHECK_THROWS_WITH(bind_or_throw(p, 0, true), Catch::Contains("rank 1 see"));
}

TEST_CASE("binding: ranks are grouped by node when it is known, not by host name", "[binding]") {
  const std::vector<std::string> two = {"GPU-0", "GPU-1"}, one = {"GPU-0"};
  // One node under two names: GPUs 0 and 1 (by host name both would take GPU 0).
  BindingPlan p = plan_binding({{"n1", two, 0}, {"n1.cluster", two, 0}});
  CHECK(p.local_rank == std::vector<int>{0, 1});
  CHECK(p.device == std::vector<int>{0, 1});
  CHECK(p.issues.empty());
  // Two nodes of one name (containers): each rank alone, no sharing (by host name: a shared GPU).
  p = plan_binding({{"localhost", one, 0}, {"localhost", one, 1}});
  CHECK(p.device == std::vector<int>{0, 0});
  CHECK(p.issues.empty());
  CHECK(!plan_binding({{"localhost", one}, {"localhost", one}}).issues.empty());
  // Sharing within a node named by aliases: the message names the node by its first rank's host.
  p = plan_binding({{"n1", one, 0}, {"n1.cluster", one, 0}});
  REQUIRE(has(p, BindingIssue::Kind::kSharedGpu));
  CHECK(get(p, BindingIssue::Kind::kSharedGpu).message == "ranks 0 and 1 on host n1 would both bind GPU GPU-0");
  CHECK_THROWS_AS(bind_or_throw(p, 1, false), UsageError);
}
