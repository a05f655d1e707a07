// The NCCL communicator on one rank (world size 1): every collective must run through NCCL and
// leave the data as the identity (sum and average over one rank, broadcast from itself).
#include <catch2/catch.hpp>

#include <span>

#include "mpi/nccl_communicator.hpp"
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
