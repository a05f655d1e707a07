// mpi/whereabouts.hpp: the line a rank answers a peer's probe with (its step, phase and collectives).
#include <catch2/catch.hpp>

#include <string>

#include "mpi/whereabouts.hpp"

using namespace ht;

TEST_CASE("whereabouts: step, phase, the collective a rank is in and the last it finished", "[whereabouts]") {
  note_step(12);
  note_phase("forward");
  note_collective_begin("agree_step_flags (MPI_Allreduce at a step boundary)");
  std::string t = whereabouts_text();
  CHECK(t.rfind("step 12, phase forward; in 1 collective, the latest #", 0) == 0);
  CHECK(t.find(" 'agree_step_flags (MPI_Allreduce at a step boundary)' for ") != std::string::npos);
  note_collective_begin("background allreduce_average of a gradient bucket");  // another thread's, nested here
  CHECK(whereabouts_text().find("; in 2 collectives, the latest #") != std::string::npos);
  note_collective_end();
  note_collective_end();
  note_phase("data");
  note_step(13);
  t = whereabouts_text();
  CHECK(t.rfind("step 13, phase data; in no collective, the last #", 0) == 0);
  // The outer wait ended last: it is the one named.
  CHECK(t.find(" 'agree_step_flags (MPI_Allreduce at a step boundary)' finished ") != std::string::npos);
  CHECK(t.size() <= kWhereaboutsMax);
}

TEST_CASE("whereabouts: a long collective name is cut to the datagram's size", "[whereabouts]") {
  static const std::string longname(1000, 'x');
  note_collective_begin(longname.c_str());
  const std::string t = whereabouts_text();
  CHECK(t.size() == kWhereaboutsMax);
  note_collective_end();
}
