#pragma once
// Node qualification (`hpctrain doctor --qualify`): before a long run, every rank measures its
// device's compute (a float32 GEMM through the training's own linear op) and its network to the
// ranks of every other node (MPI_Sendrecv in a round-robin of node pairs, so each pair is measured
// alone); rank 0 rates each node by its weakest rank and names the nodes below a fraction of the
// median node. docs/cli.md "hpctrain doctor" describes the output.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/tensor.hpp"
#include "mpi/dist.hpp"

namespace ht {

/// One rank's figures.
struct QualifyMeasure {
  double gflops = 0;                   ///< GEMM throughput, GFLOP/s
  std::vector<double> gbps_by_node;    ///< GB/s (each direction) to every node index; 0 for its own node
};

/// This rank's compute check: y[256,1024] = x[256,1024] w[1024,1024]^T (linear_forward, float32) on
/// `device` (the rank's bound GPU is current for cuda), repeated for about `seconds`; GFLOP/s.
/// `slowdown` (>= 1, the test fault doctor.qualify_slowdown) scales the measured time.
double qualify_compute(Device device, double seconds, double slowdown = 1);

/// The node index of every rank: nodes numbered by their first rank, from `hosts` (one per rank).
std::vector<int> node_of_ranks(const std::vector<std::string>& hosts);

/// This rank's network check, collective: the K nodes are paired in K - 1 rounds (a round-robin
/// tournament, a bye when K is odd); in each round a rank exchanges `mb` MiB each way (`iters`
/// MPI_Sendrecv) with the rank of the partner node at its own local index (modulo that node's
/// size). GB/s per partner node, index by node; empty for one node. `slowdown` scales the time.
std::vector<double> qualify_network(const DistContext& d, const std::vector<std::string>& hosts, double mb, int iters,
                                    double slowdown = 1);

/// One node's verdict.
struct NodeQualification {
  std::string host;
  std::vector<int> ranks;
  double gflops = 0;  ///< its weakest rank's
  double gbps = 0;    ///< median over the other nodes of its weakest rank's GB/s to that node (0: one node)
  bool slow_compute = false, slow_network = false;
};

/// Rates every node from the ranks' measures (indexed by rank): a node is slow when its figure is
/// below `fraction` times the median node's. The network figure names a node only with 3 nodes or
/// more (with 2, a slow link cannot be told from a slow node). Pure function.
std::vector<NodeQualification> qualify_nodes(const std::vector<std::string>& hosts,
                                             const std::vector<QualifyMeasure>& measures, double fraction);

/// The table rank 0 prints: one line per node, then the nodes named, or that every node qualified.
std::string format_qualification(const std::vector<NodeQualification>& nodes, double fraction);

void to_json(nlohmann::json& j, const NodeQualification& n);

}  // namespace ht
