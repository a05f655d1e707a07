// Trace across ranks (mpi/trace.hpp): clock alignment by ping-pong with rank 0, one merged Chrome trace
// written by rank 0 with one process per rank, spans that nest, and step coverage by the child spans.
#include <catch2/catch.hpp>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "mpi/trace.hpp"

using namespace ht;

namespace {
void busy_ms(double ms) {
  auto end = std::chrono::steady_clock::now() + std::chrono::microseconds(static_cast<int64_t>(ms * 1000));
  while (std::chrono::steady_clock::now() < end) {
  }
}
}  // namespace

TEST_CASE("trace: two ranks merge into one Chrome trace", "[trace]") {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  Trace t;
  t.enable(MPI_COMM_WORLD);
  t.set_thread_name("main");
  // Same host: CLOCK_MONOTONIC is shared, so no estimate is needed and the offset is exactly 0.
  CHECK(t.clock_offset_us() == 0);
  CHECK(t.clock_rtt_us() == 0);

  // Causality on the aligned axis (independent of scheduling delays): a message sent after a span began
  // on one rank is received, and the receiving span ends, after that instant. Tolerance: 1 ms of
  // offset-estimation error.
  for (int round = 0; round < 2; ++round) {
    const int sender = round == 0 ? 0 : 1, receiver = 1 - sender;
    int64_t sent = 0;
    if (rank == sender) {
      sent = t.now_us();
      MPI_Send(&sent, 1, MPI_INT64_T, receiver, 99, MPI_COMM_WORLD);
    } else if (rank == receiver) {
      MPI_Recv(&sent, 1, MPI_INT64_T, sender, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      CHECK(sent <= t.now_us() + 1000);
    }
  }

  for (int step = 0; step < 3; ++step) {
    TraceSpan s(t, "step");
    { TraceSpan d(t, "data"); busy_ms(2); }
    { TraceSpan f(t, "forward"); busy_ms(4 + rank); }
    {
      TraceSpan b(t, "backward");
      for (int k = 0; k < 2; ++k) {
        TraceSpan a(t, "allreduce", "comm", k);
        busy_ms(2);
      }
    }
    { TraceSpan o(t, "optimizer"); busy_ms(2); }
  }
  auto dir = std::filesystem::temp_directory_path() / "ht_trace_np";
  if (rank == 0) std::filesystem::remove_all(dir);
  MPI_Barrier(MPI_COMM_WORLD);
  t.write(dir.string());
  if (rank != 0) return;

  std::ifstream f(dir / "trace.json");
  REQUIRE(f);
  auto j = nlohmann::json::parse(f);
  std::map<int, std::vector<nlohmann::json>> by_pid;
  std::map<int, std::string> names;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "X") by_pid[e["pid"].get<int>()].push_back(e);
    if (e["ph"] == "M" && e["name"] == "process_name") names[e["pid"]] = e["args"]["name"];
  }
  REQUIRE(static_cast<int>(by_pid.size()) == size);
  for (auto& [pid, evs] : by_pid) {
    CHECK_THAT(names[pid], Catch::StartsWith("rank " + std::to_string(pid)));
    CHECK(evs.size() == 3 * 7);
    // Nesting: sorted by begin (longer first on ties), every span lies inside the enclosing open one.
    std::sort(evs.begin(), evs.end(), [](const auto& a, const auto& b) {
      return a["ts"] != b["ts"] ? a["ts"] < b["ts"] : a["dur"] > b["dur"];
    });
    std::vector<std::pair<int64_t, int64_t>> open;
    for (const auto& e : evs) {
      int64_t b = e["ts"], en = b + e["dur"].get<int64_t>();
      while (!open.empty() && open.back().second <= b) open.pop_back();
      if (!open.empty()) CHECK(en <= open.back().second);
      open.emplace_back(b, en);
    }
    // Coverage: the direct children of each step cover >= 95% of it.
    for (const auto& st : evs) {
      if (st["name"] != "step") continue;
      int64_t b = st["ts"], en = b + st["dur"].get<int64_t>(), covered = 0;
      for (const auto& c : evs) {
        std::string n = c["name"];
        if (n == "data" || n == "forward" || n == "backward" || n == "optimizer") {
          int64_t cb = c["ts"], ce = cb + c["dur"].get<int64_t>();
          if (cb >= b && ce <= en) covered += ce - cb;
        }
      }
      CHECK(covered >= 0.95 * (en - b));
    }
  }
}
