#include <catch2/catch.hpp>

#include <chrono>
#include <optional>
#include <thread>
#include <vector>

#include "mpi/collective_guard.hpp"
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
  // What error messages of waits outside the watchdog (NCCL's) say of the peers.
  CHECK(probe_peers_text(3.0).rfind("every peer answered a probe", 0) == 0);
  // A probe that is told to end at once reports the peers that had not answered yet (or none).
  const auto cut = peer_beacon_unanswered(3.0, [] { return true; });
  CHECK(cut.size() <= static_cast<size_t>(d.world_size - 1));
  MPI_Barrier(MPI_COMM_WORLD);  // no rank ends (and stops answering) before the others have probed
}

// A rank that ends the run tells the peers that still answer (the collective guard's give_up): each of
// them, and only they, get the notice with the sender and its lost ranks.
TEST_CASE("peer beacon: a notice reaches the ranks told, with the lost ranks", "[peer_notice]") {
  dist_init(nullptr, nullptr);
  const auto& d = dist();
  REQUIRE(peer_beacon_attach(MPI_COMM_WORLD, d.rank, d.hosts));
  if (d.world_size < 2) return;
  const int last = d.world_size - 1;
  // Rank 0 tells every rank but the last that it lost the last one, listed 301 times: the list stops
  // at 256 and the count, untrusted, at world_size.
  if (d.rank == 0) {
    CHECK_FALSE(peer_beacon_notice());
    std::vector<int> told, lost{last};
    for (int r = 1; r < last; ++r) told.push_back(r);
    for (int k = 0; k < 300; ++k) lost.push_back(last);
    peer_beacon_notify_gave_up(told, lost);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const bool told = d.rank > 0 && d.rank < last;
  std::optional<PeerNotice> n;
  const auto t0 = std::chrono::steady_clock::now();
  while (!(n = peer_beacon_notice()) &&
         std::chrono::steady_clock::now() - t0 < std::chrono::duration<double>(told ? 3.0 : 0.5))
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (told) {
    REQUIRE(n);
    CHECK(n->from == 0);
    CHECK(n->lost_count == d.world_size);
    CHECK(n->lost.size() == 256);
    CHECK(n->lost.front() == last);
  } else {
    CHECK_FALSE(n);  // rank 0 itself and the last rank were not told
  }
  MPI_Barrier(MPI_COMM_WORLD);
}
