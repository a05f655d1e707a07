// The NCCL communicator on one rank (world size 1): every collective must run through NCCL and
// leave the data as the identity (sum and average over one rank, broadcast from itself). The GPU
// verification machine has one GPU, and NCCL refuses two ranks on one GPU, so multi-rank NCCL is not
// tested here; the time limit is (a two-rank communicator whose peer never comes).
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <span>
#include <string>

#include "mpi/gpu/nccl_communicator.hpp"
#include "tests/gpu/gpu_test_util.hpp"

using namespace ht;
using namespace ht::gputest;

TEST_CASE("NCCL single-rank allreduce, broadcast and overlapped average", "[gpu_nccl]") {
  auto comm = make_nccl_communicator(60.0);
  REQUIRE(comm->name() == "nccl");
  REQUIRE(comm->device() == Device::cuda);
  REQUIRE(comm->world_size() == 1);
  REQUIRE(comm->rank() == 0);

  Tensor ref = randn({100003}, 5);
  Tensor g = gpu(ref);
  std::span<float> s(static_cast<float*>(g.raw()), static_cast<size_t>(g.numel()));
  comm->allreduce_sum(s);
  CHECK(bit_equal(g, ref));
  comm->allreduce_average(s);
  CHECK(bit_equal(g, ref));
  comm->broadcast(s, 0);
  CHECK(bit_equal(g, ref));

  // Two buckets started back to back, then waited for; the compute stream is ordered after them.
  Tensor g2 = gpu(ref);
  std::span<float> a(static_cast<float*>(g2.raw()), 50000);
  std::span<float> b(static_cast<float*>(g2.raw()) + 50000, static_cast<size_t>(g2.numel()) - 50000);
  comm->start_allreduce_average(a);
  comm->start_allreduce_average(b);
  const double ms = comm->wait_all();
  CHECK(ms >= 0.0);
  CHECK(bit_equal(g2, ref));
  CHECK(comm->wait_all() == 0.0);  // nothing pending
}

// The time limit, checkable on one GPU: a two-rank communicator whose second rank never arrives
// (its unique id was never shared). Non-blocking initialisation must give up after the limit, abort
// the communicator and throw the timeout message naming the rank, the operation, the limit, the
// NCCL_* settings in effect and the NCCL_DEBUG=INFO hint. A hang here (ncclCommAbort not returning)
// is caught by the ctest TIMEOUT of gpu_nccl_timeout.
TEST_CASE("NCCL initialisation with a peer that never arrives times out with a clear error", "[gpu_nccl_timeout]") {
  setenv("NCCL_HT_TEST_MARKER", "1", 1);  // shows up in the settings text of the message
  const auto t0 = std::chrono::steady_clock::now();
  std::string msg;
  try {
    auto comm = make_nccl_communicator_unjoined_for_test(2, 0, 3.0);
    FAIL("ncclCommInitRankConfig over 2 ranks completed with only one rank present");
  } catch (const RuntimeError& e) {
    msg = e.what();
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(msg);
  CHECK(s >= 2.9);   // waited for the limit...
  CHECK(s < 20.0);   // ...and not much longer (abort returned)
  CHECK_THAT(msg, Catch::Contains("initialisation") && Catch::Contains("on rank 0") &&
                      Catch::Contains("within 3 s") && Catch::Contains("aborted") &&
                      Catch::Contains("NCCL_HT_TEST_MARKER=1") && Catch::Contains("NCCL_DEBUG=INFO"));
  unsetenv("NCCL_HT_TEST_MARKER");
}
