#include <catch2/catch.hpp>

#include "mpi/dist.hpp"

using namespace ht;

TEST_CASE("dist: rank, local_rank and agreement", "[dist]") {
  dist_init(nullptr, nullptr);
  const auto& d = dist();
  CHECK(d.world_size >= 1);
  CHECK(d.local_rank < d.local_size);
  CHECK(static_cast<int>(d.hosts.size()) == d.world_size);
  CHECK(dist_any(d.rank == d.world_size - 1));
  CHECK_FALSE(dist_any(false));
  CHECK(dist_max(d.rank) == d.world_size - 1);
  CHECK(dist_sum(1.0) == d.world_size);
}
