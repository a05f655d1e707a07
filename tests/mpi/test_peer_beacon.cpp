#include <catch2/catch.hpp>

#include <chrono>

#include "mpi/dist.hpp"
#include "mpi/peer_beacon.hpp"

using namespace ht;

// The UDP beacon of the collective guard (mpi/peer_beacon.hpp): every live peer answers at once.
TEST_CASE("peer beacon: every live rank answers a probe", "[dist]") {
  dist_init(nullptr, nullptr);
  const auto& d = dist();
  REQUIRE(peer_beacon_attach(MPI_COMM_WORLD, d.rank, d.hosts));
  CHECK(peer_beacon_ready());
  CHECK(peer_beacon_attach(MPI_COMM_WORLD, d.rank, d.hosts));  // once: the same answer, no collective
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(peer_beacon_unanswered(3.0).empty());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(s < 2.5);  // ends when the last answer arrives, not at the 3 s window (slack for a loaded machine)
  // A probe that is told to end at once reports the peers that had not answered yet (or none).
  const auto cut = peer_beacon_unanswered(3.0, [] { return true; });
  CHECK(cut.size() <= static_cast<size_t>(d.world_size - 1));
  MPI_Barrier(MPI_COMM_WORLD);  // no rank ends (and stops answering) before the others have probed
}
