// Bucket planning and launch scheduling (mpi/bucketer.hpp) without MPI: a fake communicator records
// what would be averaged.
#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>
#include <random>

#include "mpi/bucketer.hpp"

using namespace ht;

namespace {

constexpr int64_t kMiBFloats = 1024 * 1024 / 4;

std::vector<ParamSlice> contiguous(const std::vector<int64_t>& counts) {
  std::vector<ParamSlice> p;
  int64_t off = 0;
  for (auto c : counts) {
    p.push_back({off, c});
    off += c;
  }
  return p;
}

// Records started spans (as offsets into a base buffer) and the order of calls.
class RecordingComm : public Communicator {
 public:
  RecordingComm(int world, const float* base) : world_(world), base_(base) {}
  std::string name() const override { return "fake"; }
  Device device() const override { return Device::cpu; }
  int rank() const override { return 0; }
  int world_size() const override { return world_; }
  void allreduce_sum(std::span<float>) override { FAIL("unexpected"); }
  void allreduce_average(std::span<float>) override { FAIL("unexpected"); }
  void broadcast(std::span<float>, int) override { FAIL("unexpected"); }
  void reduce_sum(std::span<float>, int) override { FAIL("unexpected"); }
  void broadcast_bytes(std::vector<char>&, int) override { FAIL("unexpected"); }
  void start_allreduce_average(std::span<float> d) override {
    started.emplace_back(d.data() - base_, d.data() - base_ + static_cast<int64_t>(d.size()));
  }
  double wait_all() override {
    ++waits;
    return 0.0;
  }
  std::vector<std::pair<int64_t, int64_t>> started;
  int waits = 0;

 private:
  int world_;
  const float* base_;
};

void check_cover(const std::vector<BucketPlan>& plan, int64_t total, int nparams) {
  // Reverse order: bucket 0 ends at the buffer's end, each next one ends where the previous began.
  REQUIRE(!plan.empty());
  CHECK(plan.front().end == total);
  CHECK(plan.back().begin == 0);
  CHECK(plan.front().last_param == nparams - 1);
  CHECK(plan.back().first_param == 0);
  for (size_t b = 1; b < plan.size(); ++b) {
    CHECK(plan[b].end == plan[b - 1].begin);
    CHECK(plan[b].last_param == plan[b - 1].first_param - 1);
  }
  for (const auto& b : plan) CHECK(b.begin < b.end);
}

}  // namespace

TEST_CASE("bucket plan: reverse order, sizes within the cap, exact cover", "[bucket]") {
  // 10 parameters of 0.3 MiB with a 1 MiB cap: 3 per bucket, counting from the last.
  std::vector<int64_t> counts(10, kMiBFloats * 3 / 10);
  auto params = contiguous(counts);
  int64_t total = params.back().offset + params.back().count;
  auto plan = plan_buckets(params, 1.0);
  check_cover(plan, total, 10);
  REQUIRE(plan.size() == 4);
  CHECK(plan[0].first_param == 7);
  CHECK(plan[0].last_param == 9);
  CHECK(plan[1].first_param == 4);
  CHECK(plan[2].first_param == 1);
  CHECK(plan[3].first_param == 0);
  CHECK(plan[3].last_param == 0);
  for (const auto& b : plan) CHECK(b.end - b.begin <= kMiBFloats);
}

TEST_CASE("bucket plan: a parameter larger than the cap gets its own bucket", "[bucket]") {
  // counts: small, huge (3 MiB), small, small with a 1 MiB cap.
  std::vector<int64_t> counts = {1000, 3 * kMiBFloats, 2000, 3000};
  auto params = contiguous(counts);
  int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  auto plan = plan_buckets(params, 1.0);
  check_cover(plan, total, 4);
  REQUIRE(plan.size() == 3);
  CHECK((plan[0].first_param == 2 && plan[0].last_param == 3));
  CHECK((plan[1].first_param == 1 && plan[1].last_param == 1));
  CHECK(plan[1].end - plan[1].begin == 3 * kMiBFloats);
  CHECK((plan[2].first_param == 0 && plan[2].last_param == 0));
}

TEST_CASE("bucket plan: random sizes cover the flat buffer exactly once", "[bucket]") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    int n = 1 + static_cast<int>(rng() % 40);
    std::vector<int64_t> counts;
    for (int i = 0; i < n; ++i) counts.push_back(1 + static_cast<int64_t>(rng() % 200000));
    auto params = contiguous(counts);
    int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
    double mb = 0.05 + (rng() % 100) / 100.0;
    auto plan = plan_buckets(params, mb);
    check_cover(plan, total, n);
    std::vector<int> seen(static_cast<size_t>(total), 0);
    const int64_t cap = static_cast<int64_t>(mb * 1024 * 1024 / 4);
    for (const auto& b : plan) {
      for (int64_t k = b.begin; k < b.end; ++k) ++seen[static_cast<size_t>(k)];
      if (b.first_param != b.last_param) CHECK(b.end - b.begin <= cap);
    }
    CHECK(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
  }
}

TEST_CASE("bucket plan: gaps between parameters are covered; bad input rejected", "[bucket]") {
  std::vector<ParamSlice> params = {{0, 10}, {16, 10}, {32, 5}};  // padded to 16 floats
  auto plan = plan_buckets(params, 1.0);
  REQUIRE(plan.size() == 1);
  CHECK(plan[0].begin == 0);
  CHECK(plan[0].end == 37);
  CHECK_THROWS_AS(plan_buckets(params, 0.0), UsageError);
  CHECK_THROWS_WITH(plan_buckets(params, -1.0), Catch::Contains("dist.bucket_mb"));
  CHECK_THROWS_AS(plan_buckets({{0, 10}, {5, 10}}, 1.0), RuntimeError);
}

TEST_CASE("bucketer: launches in bucket order whatever the marking order", "[bucket]") {
  std::vector<int64_t> counts(12, kMiBFloats / 4);  // 4 per 1 MiB bucket -> 3 buckets
  auto params = contiguous(counts);
  std::vector<float> flat(static_cast<size_t>(12 * kMiBFloats / 4));
  RecordingComm comm(2, flat.data());
  GradBucketer bk(comm, flat, params, 1.0);
  REQUIRE(bk.num_buckets() == 3);
  const auto ranges = bk.bucket_ranges();

  SECTION("reverse registration order launches each bucket as soon as it is complete") {
    bk.begin_step();
    for (int i = 11; i >= 8; --i) bk.mark_ready(i);
    CHECK(comm.started.size() == 1);
    for (int i = 7; i >= 0; --i) bk.mark_ready(i);
    CHECK(comm.started.size() == 3);
    bk.finish();
    CHECK(comm.started == ranges);
    CHECK(bk.stats().buckets_launched_early == 3);
    CHECK(bk.stats().bytes_per_step == static_cast<int64_t>(flat.size() * 4));
  }
  SECTION("a later bucket completed first is held until the earlier ones launch") {
    bk.begin_step();
    for (int i = 0; i < 4; ++i) bk.mark_ready(i);  // bucket 2 complete first
    CHECK(comm.started.empty());
    for (int i = 4; i < 8; ++i) bk.mark_ready(i);  // bucket 1
    CHECK(comm.started.empty());
    for (int i = 8; i < 11; ++i) bk.mark_ready(i);
    CHECK(comm.started.empty());
    bk.mark_ready(11);  // bucket 0 complete: all three go, in order
    CHECK(comm.started == ranges);
    bk.finish();
    CHECK(comm.waits == 1);
  }
  SECTION("shuffled marking: same launch sequence on every trial") {
    std::mt19937 rng(3);
    for (int t = 0; t < 20; ++t) {
      comm.started.clear();
      std::vector<int> order(12);
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);
      bk.begin_step();
      for (int i : order) bk.mark_ready(i);
      bk.finish();
      CHECK(comm.started == ranges);
    }
  }
  SECTION("finish starts incomplete buckets; misuse is reported") {
    bk.begin_step();
    bk.mark_ready(11);
    CHECK_THROWS_AS(bk.mark_ready(11), RuntimeError);
    CHECK_THROWS_AS(bk.mark_ready(12), RuntimeError);
    CHECK_THROWS_AS(bk.begin_step(), RuntimeError);
    bk.finish();
    CHECK(comm.started == ranges);
    comm.started.clear();
    bk.mark_ready(3);  // outside a step (accumulation micro-batch): ignored
    CHECK(comm.started.empty());
  }
}

TEST_CASE("bucketer: world_size 1 never calls the communicator", "[bucket]") {
  auto params = contiguous({100, 200, 300});
  std::vector<float> flat(600, 1.5f);
  RecordingComm comm(1, flat.data());
  GradBucketer bk(comm, flat, params, 0.001);
  bk.begin_step();
  for (int i = 2; i >= 0; --i) bk.mark_ready(i);
  CHECK(bk.finish() == 0.0);
  CHECK(comm.started.empty());
  CHECK(comm.waits == 0);
  CHECK(std::all_of(flat.begin(), flat.end(), [](float x) { return x == 1.5f; }));
}
