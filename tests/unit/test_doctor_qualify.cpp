// Node qualification's verdict (src/cli/doctor_qualify.hpp) on hand-made measures: nodes rated by
// their weakest rank, the network by the median of a node's links, the 2- and 1-node cases.
#include <catch2/catch.hpp>

#include "base/stats.hpp"
#include "src/cli/doctor_qualify.hpp"

using namespace ht;

namespace {

QualifyMeasure m(double gflops, std::vector<double> gbps) {
  QualifyMeasure q;
  q.gflops = gflops;
  q.gbps_by_node = std::move(gbps);
  return q;
}

}  // namespace

TEST_CASE("qualify: node numbering by first rank, rank lists", "[doctor][qualify]") {
  CHECK(node_of_ranks({"b", "b", "a", "c", "a"}) == std::vector<int>{0, 0, 1, 2, 1});
  CHECK(ranks_text({3}) == "rank 3");
  CHECK(ranks_text({0, 1, 2, 3}) == "ranks 0-3");
  CHECK(ranks_text({0, 2, 3, 5}) == "ranks 0, 2-3, 5");
}

TEST_CASE("qualify: the slow GPU and the slow link are named, by the weakest rank and the median link",
          "[doctor][qualify]") {
  // 4 nodes, 2 ranks each. Node n2 has one slow device (rank 5); node n3's links are all slow, so the
  // other nodes each see one slow link among three (their median stays high).
  const std::vector<std::string> hosts = {"n0", "n0", "n1", "n1", "n2", "n2", "n3", "n3"};
  const std::vector<QualifyMeasure> ms = {
      m(100, {0, 10, 10, 2}), m(101, {0, 10, 11, 2}),  // n0
      m(99, {10, 0, 10, 2}),  m(100, {10, 0, 10, 2}),  // n1
      m(100, {10, 10, 0, 2}), m(40, {10, 10, 0, 2}),   // n2: rank 5 slow
      m(100, {2, 2, 2, 0}),   m(98, {2, 2, 2, 0}),     // n3: every link slow
  };
  const auto nodes = qualify_nodes(hosts, ms, 0.8);
  REQUIRE(nodes.size() == 4);
  CHECK(nodes[0].ranks == std::vector<int>{0, 1});
  CHECK(nodes[2].gflops == 40);  // the weakest rank
  CHECK(nodes[0].gbps == 10);    // median of 10, 10, 2
  CHECK(nodes[3].gbps == 2);
  CHECK((!nodes[0].slow_compute && !nodes[0].slow_network));
  CHECK((!nodes[1].slow_compute && !nodes[1].slow_network));
  CHECK((nodes[2].slow_compute && !nodes[2].slow_network));
  CHECK((!nodes[3].slow_compute && nodes[3].slow_network));
  const std::string t = format_qualification(nodes, 0.8);
  CHECK(t.find("2 of 4 nodes qualified; slow: n2 (compute); n3 (network)") != std::string::npos);
  CHECK(t.find("SLOW: compute") != std::string::npos);
  // Ranks that did not take part in a pair (0 GB/s) do not count against their node.
  std::vector<QualifyMeasure> idle = ms;
  idle[1].gbps_by_node = {0, 0, 0, 0};
  CHECK(qualify_nodes(hosts, idle, 0.8)[0].gbps == 10);
}

TEST_CASE("qualify: two nodes rate compute only, one node nothing", "[doctor][qualify]") {
  auto two = qualify_nodes({"a", "b"}, {m(100, {0, 1}), m(30, {0.1, 0})}, 0.8);
  CHECK(two[1].slow_compute);
  CHECK_FALSE(two[1].slow_network);  // 0.1 vs 1, but with two nodes the link is both's
  CHECK_FALSE(two[0].slow_network);
  CHECK(format_qualification(two, 0.8).find("two nodes: a slow link cannot be told") != std::string::npos);
  auto one = qualify_nodes({"a", "a"}, {m(100, {}), m(10, {})}, 0.8);
  REQUIRE(one.size() == 1);
  CHECK(one[0].gflops == 10);
  CHECK_FALSE(one[0].slow_compute);
  CHECK(format_qualification(one, 0.8).find("1 of 1 nodes qualified") != std::string::npos);
}
