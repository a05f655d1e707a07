// Node qualification (doctor_qualify.hpp).
#include "src/cli/doctor_qualify.hpp"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>

#include "base/stats.hpp"
#include "mpi/check.hpp"
#include "mpi/collective_guard.hpp"
#include "src/ops/linear.hpp"
#if defined(HT_HAVE_CUDA)
#include <cuda_runtime.h>

#include "cuda/check.hpp"
#endif

namespace ht {
namespace {

void device_sync(Device device) {
#if defined(HT_HAVE_CUDA)
  if (device == Device::cuda) HT_CUDA_CHECK(cudaDeviceSynchronize());
#else
  (void)device;
#endif
}

}  // namespace

double qualify_compute(Device device, double seconds, double slowdown) {
  const LinearShape sh{256, 1024, 1024};
  Tensor x = Tensor::zeros({sh.n, sh.in}, DType::f32, device), w = Tensor::zeros({sh.out, sh.in}, DType::f32, device);
  Tensor y = Tensor::empty({sh.n, sh.out}, DType::f32, device);
  OpCachePtr cache;
  for (int i = 0; i < 2; ++i) linear_forward(cache, sh, x, w, nullptr, y);  // warm-up: kernels chosen, caches filled
  device_sync(device);
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  int64_t iters = 0;
  double t = 0;
  do {
    for (int i = 0; i < 4; ++i) linear_forward(cache, sh, x, w, nullptr, y);
    device_sync(device);
    iters += 4;
    t = std::chrono::duration<double>(clock::now() - t0).count();
  } while (t < seconds);
  return 2.0 * sh.n * sh.in * sh.out * static_cast<double>(iters) / (t * slowdown) * 1e-9;
}

std::vector<int> node_of_ranks(const std::vector<std::string>& hosts) {
  std::map<std::string, int> index;
  std::vector<int> node(hosts.size());
  for (size_t r = 0; r < hosts.size(); ++r) {
    auto [it, added] = index.emplace(hosts[r], static_cast<int>(index.size()));
    node[r] = it->second;
  }
  return node;
}

std::vector<double> qualify_network(const DistContext& d, const std::vector<std::string>& hosts, double mb, int iters,
                                    double slowdown) {
  const std::vector<int> node = node_of_ranks(hosts);
  const int K = node.empty() ? 0 : *std::max_element(node.begin(), node.end()) + 1;
  if (K < 2) return {};
  std::vector<std::vector<int>> ranks_of(static_cast<size_t>(K));
  for (size_t r = 0; r < node.size(); ++r) ranks_of[static_cast<size_t>(node[r])].push_back(static_cast<int>(r));
  const int me = node[static_cast<size_t>(d.rank)];
  const auto& mine = ranks_of[static_cast<size_t>(me)];
  const int local = static_cast<int>(std::find(mine.begin(), mine.end(), d.rank) - mine.begin());
  const size_t bytes = static_cast<size_t>(mb * (1 << 20));
  std::vector<char> send(bytes, 1), recv(bytes);
  std::vector<double> gbps(static_cast<size_t>(K), 0.0);
  // Round-robin tournament (circle method) over M = K or K + 1 places: in round r, place M - 1 meets
  // r and every other x meets (2r - x) mod (M - 1); a meeting with place K (K odd) is a bye.
  const int M = K % 2 ? K + 1 : K;
  CollectiveWait wait("doctor --qualify: network check (MPI_Sendrecv between node pairs)");
  for (int round = 0; round < M - 1; ++round) {
    int partner = me == M - 1 ? round : me == round ? M - 1 : ((2 * round - me) % (M - 1) + (M - 1)) % (M - 1);
    if (partner >= K) continue;  // a bye
    const auto& theirs = ranks_of[static_cast<size_t>(partner)];
    // Only the local indices both nodes have take part, each with the same index there.
    if (local >= static_cast<int>(std::min(mine.size(), theirs.size()))) continue;
    const int peer = theirs[static_cast<size_t>(local)];
    auto exchange = [&] {
      HT_MPI_CHECK(MPI_Sendrecv(send.data(), static_cast<int>(bytes), MPI_BYTE, peer, round, recv.data(),
                                static_cast<int>(bytes), MPI_BYTE, peer, round, d.world, MPI_STATUS_IGNORE));
    };
    exchange();  // warm-up: connections set up
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) exchange();
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * slowdown;
    gbps[static_cast<size_t>(partner)] = static_cast<double>(bytes) * iters / t * 1e-9;
  }
  return gbps;
}

std::vector<NodeQualification> qualify_nodes(const std::vector<std::string>& hosts,
                                             const std::vector<QualifyMeasure>& measures, double fraction) {
  const std::vector<int> node = node_of_ranks(hosts);
  const int K = node.empty() ? 0 : *std::max_element(node.begin(), node.end()) + 1;
  std::vector<NodeQualification> out(static_cast<size_t>(K));
  for (size_t r = 0; r < node.size(); ++r) {
    NodeQualification& n = out[static_cast<size_t>(node[r])];
    if (n.ranks.empty()) {
      n.host = hosts[r];
      n.gflops = measures[r].gflops;
    }
    n.ranks.push_back(static_cast<int>(r));
    n.gflops = std::min(n.gflops, measures[r].gflops);
  }
  for (int k = 0; k < K; ++k) {
    std::vector<double> links;  // to every other node: its weakest rank's figure among those that took part
    for (int m = 0; m < K; ++m) {
      if (m == k) continue;
      double weakest = 0;
      for (int r : out[static_cast<size_t>(k)].ranks) {
        const auto& g = measures[static_cast<size_t>(r)].gbps_by_node;
        const double v = static_cast<size_t>(m) < g.size() ? g[static_cast<size_t>(m)] : 0;
        if (v > 0) weakest = weakest > 0 ? std::min(weakest, v) : v;
      }
      if (weakest > 0) links.push_back(weakest);
    }
    out[static_cast<size_t>(k)].gbps = median(links);
  }
  std::vector<double> flops, nets;
  for (const auto& n : out) {
    flops.push_back(n.gflops);
    nets.push_back(n.gbps);
  }
  const double mf = median(flops), mn = median(nets);
  for (auto& n : out) {
    n.slow_compute = K >= 2 && n.gflops < fraction * mf;
    n.slow_network = K >= 3 && n.gbps < fraction * mn;
  }
  return out;
}

std::string format_qualification(const std::vector<NodeQualification>& nodes, double fraction) {
  std::vector<double> flops, nets;
  for (const auto& n : nodes) {
    flops.push_back(n.gflops);
    nets.push_back(n.gbps);
  }
  const double mf = median(flops), mn = median(nets);
  char line[256];
  std::snprintf(line, sizeof line, "node qualification (slow: below %.2f x the median node)\n", fraction);
  std::string out = line;
  std::snprintf(line, sizeof line, "  %-20s %-10s %22s %22s  %s\n", "node", "ranks", "GEMM GFLOP/s (x med)",
                "network GB/s (x med)", "verdict");
  out += line;
  std::string slow;
  int qualified = 0;
  for (const auto& n : nodes) {
    std::string ranks = ranks_text(n.ranks);
    ranks = ranks.substr(ranks.find(' ') + 1);  // the numbers only
    char f[64], g[64];
    std::snprintf(f, sizeof f, "%.1f (%.2f)", n.gflops, mf > 0 ? n.gflops / mf : 0.0);
    if (nodes.size() > 1)
      std::snprintf(g, sizeof g, "%.3f (%.2f)", n.gbps, mn > 0 ? n.gbps / mn : 0.0);
    else
      std::snprintf(g, sizeof g, "-");
    std::string verdict = "ok";
    if (n.slow_compute || n.slow_network) {
      verdict = std::string("SLOW: ") + (n.slow_compute ? "compute" : "") + (n.slow_compute && n.slow_network ? ", " : "") +
                (n.slow_network ? "network" : "");
      slow += (slow.empty() ? "" : "; ") + n.host + " (" + verdict.substr(6) + ")";
    } else {
      ++qualified;
    }
    std::snprintf(line, sizeof line, "  %-20s %-10s %22s %22s  %s\n", n.host.c_str(), ranks.c_str(), f, g, verdict.c_str());
    out += line;
  }
  out += std::to_string(qualified) + " of " + std::to_string(nodes.size()) + " nodes qualified" +
         (slow.empty() ? "" : "; slow: " + slow) + "\n";
  if (nodes.size() == 1) out += "  (one node: nothing to compare it with)\n";
  if (nodes.size() == 2) out += "  (two nodes: a slow link cannot be told from a slow node; only compute is rated)\n";
  return out;
}

void to_json(nlohmann::json& j, const NodeQualification& n) {
  j = {{"host", n.host}, {"ranks", n.ranks}, {"gflops", n.gflops}, {"gbps", n.gbps},
       {"slow_compute", n.slow_compute}, {"slow_network", n.slow_network}};
}

}  // namespace ht
