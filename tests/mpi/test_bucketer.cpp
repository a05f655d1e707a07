// GradBucketer over MpiCommunicator under mpirun (2 and 4 ranks): marking parameters in reverse and
// in shuffled order (a different order on every rank) gives the exact average in every element.
#include <catch2/catch.hpp>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "mpi/bucketer.hpp"
#include "mpi/mpi_communicator.hpp"

using namespace ht;

namespace {

struct Model {
  std::vector<ParamSlice> params;
  int64_t total = 0;
};

// 40 parameters of mixed sizes (a few large ones, like conv weights, and tiny ones, like biases).
Model make_model() {
  std::mt19937 rng(11);
  Model m;
  for (int i = 0; i < 40; ++i) {
    int64_t c = (i % 5 == 0) ? 60000 + static_cast<int64_t>(rng() % 200000) : 1 + static_cast<int64_t>(rng() % 3000);
    m.params.push_back({m.total, c});
    m.total += c;
  }
  return m;
}

// Gradient of rank r, step s: (r+1)*(i%7+1) + s. The average over n ranks is exact for n = 2, 4.
void fill(std::vector<float>& g, int r, int s) {
  for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>((r + 1) * static_cast<int>(i % 7 + 1) + s);
}
size_t count_wrong(const std::vector<float>& g, int n, int s) {
  size_t bad = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    float want = static_cast<float>(static_cast<int>(i % 7 + 1) * n * (n + 1) / 2 + n * s) / static_cast<float>(n);
    if (g[i] != want) ++bad;
  }
  return bad;
}

// What every case starts from on its rank: the communicator, the 40-parameter model and its flat gradient.
struct BucketerSetup {
  MpiCommunicator comm;
  const int r = comm.rank(), n = comm.world_size();
  Model m = make_model();
  std::vector<float> flat = std::vector<float>(static_cast<size_t>(m.total));
};

}  // namespace

TEST_CASE_METHOD(BucketerSetup, "bucketer: exact average with parameters marked in reverse order", "[bucketer]") {
  GradBucketer bk(comm, flat, m.params, 0.25);
  REQUIRE(bk.num_buckets() > 3);
  CHECK(bk.stats().bytes_per_step == m.total * 4);
  for (int step = 0; step < 3; ++step) {
    fill(flat, r, step);
    bk.begin_step();
    for (int i = static_cast<int>(m.params.size()) - 1; i >= 0; --i) {
      bk.mark_ready(i);
      if (i % 8 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // some "backward" work
    }
    double waited = bk.finish();
    CHECK(waited >= 0);
    CHECK(count_wrong(flat, n, step) == 0);
    // Reverse marking launches every bucket during backward, none is left for finish().
    CHECK(bk.stats().buckets_launched_early == bk.num_buckets());
    CHECK(bk.stats().last_step_allreduce_ms >= bk.stats().last_step_wait_ms);
  }
}

TEST_CASE_METHOD(BucketerSetup, "bucketer: exact average with a different shuffled marking order on every rank",
                 "[bucketer]") {
  GradBucketer bk(comm, flat, m.params, 0.1);
  std::mt19937 rng(100 + static_cast<unsigned>(r));  // each rank its own order
  for (int step = 0; step < 4; ++step) {
    fill(flat, r, step);
    std::vector<int> order(m.params.size());
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    bk.begin_step();
    // Mark all but a few; finish() must start the incomplete buckets itself.
    size_t upto = step == 3 ? order.size() - 5 : order.size();
    for (size_t k = 0; k < upto; ++k) bk.mark_ready(order[k]);
    bk.finish();
    INFO("step " << step);
    CHECK(count_wrong(flat, n, step) == 0);
  }
}

TEST_CASE_METHOD(BucketerSetup, "bucketer: one bucket for everything and one bucket per parameter", "[bucketer]") {
  for (double mb : {1000.0, 1e-6}) {
    GradBucketer bk(comm, flat, m.params, mb);
    CHECK(bk.num_buckets() == (mb > 1 ? 1 : static_cast<int>(m.params.size())));
    fill(flat, r, 1);
    bk.begin_step();
    for (int i = static_cast<int>(m.params.size()) - 1; i >= 0; --i) bk.mark_ready(i);
    bk.finish();
    CHECK(count_wrong(flat, n, 1) == 0);
  }
}

TEST_CASE_METHOD(BucketerSetup, "bucketer: different bucket plans on different ranks are an error on every rank", "[bucketer]") {
  // Rank 0 uses another bucket size than the others (as a mismatched dist.bucket_mb would).
  try {
    GradBucketer bk(comm, flat, m.params, r == 0 ? 1000.0 : 0.25);  // one bucket vs several
    FAIL("no error for mismatched plans");
  } catch (const RuntimeError& e) {
    INFO(e.what());
    CHECK(std::string(e.what()).find("differ between ranks") != std::string::npos);
    CHECK(std::string(e.what()).find("rank " + std::to_string(r)) != std::string::npos);
  }
  GradBucketer same(comm, flat, m.params, 0.25);  // and the same plan everywhere is accepted
  CHECK(same.num_buckets() > 1);
}
