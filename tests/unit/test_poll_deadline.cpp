// The host-side timeout logic of the NCCL communicator (mpi/gpu/poll_deadline.hpp), with fake
// predicates in place of cudaEventQuery / ncclCommGetAsyncError.
#include <catch2/catch.hpp>

#include <chrono>
#include <stdexcept>

#include "mpi/collective_guard.hpp"
#include "mpi/gpu/poll_deadline.hpp"
#include "tests/unit/text_test_util.hpp"

using namespace ht;
using ht::test::check_mentions;

TEST_CASE("poll_with_deadline returns true once the predicate holds", "[poll_deadline]") {
  int calls = 0;
  REQUIRE(poll_with_deadline([&] { return ++calls == 5; }, 10.0));
  CHECK(calls == 5);
}

TEST_CASE("poll_with_deadline gives up after the limit", "[poll_deadline]") {
  int calls = 0;
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE_FALSE(poll_with_deadline([&] { ++calls; return false; }, 0.05));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(s >= 0.05);
  CHECK(s < 2.0);
  CHECK(calls >= 2);  // polled repeatedly, not once
}

TEST_CASE("poll_with_deadline without a limit waits as long as it takes", "[poll_deadline]") {
  int calls = 0;
  REQUIRE(poll_with_deadline([&] { return ++calls == 200; }, 0.0, 10));
  CHECK(calls == 200);
}

TEST_CASE("poll_with_deadline polls once even with a past deadline and propagates errors", "[poll_deadline]") {
  int calls = 0;
  CHECK(poll_with_deadline([&] { ++calls; return true; }, 1e-9));
  CHECK(calls == 1);
  CHECK_THROWS_AS(poll_with_deadline([]() -> bool { throw std::runtime_error("async error"); }, 1.0),
                  std::runtime_error);
}

TEST_CASE("nccl_settings_text lists NCCL_* variables sorted", "[poll_deadline]") {
  char a[] = "PATH=/bin", b[] = "NCCL_IB_DISABLE=1", c[] = "NCCL_DEBUG=WARN", d[] = "XNCCL_FOO=1";
  char* env[] = {a, b, c, d, nullptr};
  CHECK(nccl_settings_text(env) == "NCCL_DEBUG=WARN NCCL_IB_DISABLE=1");
  char* none[] = {a, d, nullptr};
  CHECK(nccl_settings_text(none) == "(no NCCL_* variables set)");
}

TEST_CASE("nccl_timeout_message names rank, operation, limit, settings and the NCCL_DEBUG hint", "[poll_deadline]") {
  const std::string m = nccl_timeout_message(3, "node7", "allreduce_average (2 pending)", 30, "NCCL_IB_DISABLE=1",
                                             "lost peers (no answer to a probe within 5.0 s): node8 (ranks 4, 5)");
  check_mentions(m, {"rank 3", "node7", "allreduce_average (2 pending)", "30 s", "NCCL_IB_DISABLE=1", "NCCL_DEBUG=INFO",
                     "aborted", "lost peers (no answer to a probe within 5.0 s): node8 (ranks 4, 5)"});
}

TEST_CASE("probe_peers_text without probes set up says the peers could not be probed", "[poll_deadline]") {
  CHECK(probe_peers_text(0.1).rfind("could not probe the peers", 0) == 0);
}
