// The flight recorder (mpi/flight_recorder.hpp): its ring and dump, and flight_report's verdict
// (mpi/flight_report.hpp) on records written by hand: who waits, who never entered, who left none.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "base/error.hpp"
#include "mpi/flight_recorder.hpp"
#include "mpi/flight_report.hpp"
#include "mpi/whereabouts.hpp"
#include "temp_dir_util.hpp"

using namespace ht;
namespace fs = std::filesystem;

namespace {

nlohmann::json entry(const char* what, uint64_t occ, int64_t step, const char* phase, bool waiting, double seconds,
                     double ago) {
  return {{"seq", occ},     {"what", what},         {"occurrence", occ}, {"step", step},
          {"phase", phase}, {"thread", 0},          {"state", waiting ? "waiting" : "done"},
          {"seconds", seconds}, {"began_s_ago", ago}};
}

void write_record(const fs::path& dir, int rank, int world, int64_t step, const char* phase, nlohmann::json entries,
                  const std::string& reason = "stop signal 15") {
  fs::create_directories(dir / "flight");
  char name[32];
  std::snprintf(name, sizeof name, "rank-%05d.json", rank);
  nlohmann::json j = {{"format", "hpctrain flight record"}, {"version", 1}, {"rank", rank}, {"world_size", world},
                      {"host", "node" + std::to_string(rank / 2)}, {"pid", 100 + rank}, {"reason", reason},
                      {"written_unix_s", 0}, {"step", step}, {"phase", phase}, {"whereabouts", ""},
                      {"entries", std::move(entries)}};
  std::ofstream(dir / "flight" / name) << j.dump();
}

}  // namespace

TEST_CASE("flight recorder: the latest waits, oldest first, occurrences per name, open ones waiting", "[mpi][flight]") {
  const fs::path dir = ht::test::fresh_temp_dir("ht_flight", "ring");
  flight_recorder_set_dir(dir.string(), 3, 8, "nodeX");
  note_step(41);
  note_phase("backward");
  // 300 waits of two kinds, then one left open: the ring keeps the latest kFlightEntries.
  for (int i = 0; i < 300; ++i) {
    note_collective_begin(i % 3 == 0 ? "agree_step_flags" : "bucket allreduce");
    note_collective_end();
  }
  // A wait left by an exception (a time-out, an MPI error) is "failed", not "done".
  try {
    NotedWait noted("failing wait");
    throw std::runtime_error("x");
  } catch (const std::runtime_error&) {
  }
  note_step(42);
  note_phase("optimizer");
  note_collective_begin("bucket allreduce");
  const std::string path = flight_recorder_dump("unit test", {{5, "node2"}, {6, "node3"}});
  note_collective_end();
  REQUIRE(path == (dir / "flight" / "rank-00003.json").string());
  CHECK(flight_inspect_hint() == "hpctrain inspect --flight " + dir.string());
  nlohmann::json j;
  std::ifstream(path) >> j;
  CHECK(j["rank"] == 3);
  CHECK(j["world_size"] == 8);
  CHECK(j["host"] == "nodeX");
  CHECK(j["reason"] == "unit test");
  CHECK(j["step"] == 42);
  CHECK(j["phase"] == "optimizer");
  CHECK(j["lost"] == nlohmann::json::parse(R"([{"rank": 5, "host": "node2"}, {"rank": 6, "host": "node3"}])"));
  const auto& e = j["entries"];
  REQUIRE(e.size() == static_cast<size_t>(kFlightEntries));
  for (size_t i = 1; i < e.size(); ++i) REQUIRE(e[i]["seq"].get<uint64_t>() == e[i - 1]["seq"].get<uint64_t>() + 1);
  const auto& last = e.back();
  CHECK(last["what"] == "bucket allreduce");
  CHECK(last["state"] == "waiting");
  CHECK(last["step"] == 42);
  CHECK(last["phase"] == "optimizer");
  CHECK(last["occurrence"] == 201);  // 200 of the 300 were bucket allreduces, this is the 201st
  CHECK(e[e.size() - 2]["what"] == "failing wait");
  CHECK(e[e.size() - 2]["state"] == "failed");
  CHECK(e[e.size() - 3]["state"] == "done");
  CHECK(e[e.size() - 3]["step"] == 41);
  // No temporary file left beside it.
  int files = 0;
  for (const auto& f : fs::directory_iterator(dir / "flight")) files += f.is_regular_file();
  CHECK(files == 1);
  fs::remove_all(dir);
}

TEST_CASE("flight report: the collective some ranks entered and others did not, and who left no record",
          "[mpi][flight]") {
  const fs::path dir = ht::test::fresh_temp_dir("ht_flight", "report");
  const char* bucket = "background allreduce_average of a gradient bucket";
  // Ranks 0 and 2 wait in the 5th bucket allreduce of step 12; rank 1 finished only 4 (its compute
  // thread is in forward); rank 4 finished the 5th (it waits in a later one); rank 3 wrote nothing.
  write_record(dir, 0, 5, 12, "allreduce_wait",
               {entry(bucket, 4, 12, "backward", false, 0.1, 20), entry(bucket, 5, 12, "backward", true, 15.0, 15.0)},
               "collective time-out: background allreduce_average of a gradient bucket");
  write_record(dir, 1, 5, 12, "forward", {entry("agree_step_flags", 11, 11, "optimizer", false, 0.01, 30),
                                          entry(bucket, 4, 12, "backward", false, 0.2, 21)});
  write_record(dir, 2, 5, 12, "allreduce_wait", {entry(bucket, 5, 12, "backward", true, 14.0, 14.0)});
  write_record(dir, 4, 5, 12, "allreduce_wait",
               {entry(bucket, 5, 12, "backward", false, 0.3, 16), entry(bucket, 6, 12, "backward", true, 15.5, 15.5)});
  const std::string rep = flight_report(dir.string());
  INFO(rep);
  CHECK(rep.find("flight records of 4 of 5 ranks") != std::string::npos);
  CHECK(rep.find("rank 0 wrote it on: collective time-out") != std::string::npos);
  CHECK(rep.find(std::string("'") + bucket + "' #5 (step 12): ranks 0, 2 waiting in it (up to 15.0 s); rank 4 finished it; "
                 "not entered by rank 1") != std::string::npos);
  CHECK(rep.find("behind: rank 1 (node0): step 12, phase forward; in no collective, its last '" + std::string(bucket) +
                 "' #4 finished 20.8 s before its record") != std::string::npos);
  CHECK(rep.find("no record from rank 3 ") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("flight report: no record, a file that is not one, a bad field: errors naming them", "[mpi][flight]") {
  const fs::path dir = ht::test::fresh_temp_dir("ht_flight", "bad");
  CHECK_THROWS_WITH(flight_report(dir.string()), Catch::Contains("no flight record"));
  fs::create_directories(dir / "flight");
  std::ofstream(dir / "flight" / "rank-00000.json") << "{not json";
  CHECK_THROWS_WITH(flight_report(dir.string()), Catch::Contains("rank-00000.json: not a flight record"));
  write_record(dir, 0, 2, 1, "data", nlohmann::json::array());
  nlohmann::json j;
  std::ifstream(dir / "flight" / "rank-00000.json") >> j;
  j["entries"] = {{{"what", "x"}}};
  std::ofstream(dir / "flight" / "rank-00000.json") << j.dump();
  CHECK_THROWS_WITH(flight_report(dir.string()), Catch::Contains("field 'occurrence' missing"));
  j["entries"] = nlohmann::json::array();
  j["rank"] = 7;
  std::ofstream(dir / "flight" / "rank-00000.json") << j.dump();
  CHECK_THROWS_WITH(flight_report(dir.string()), Catch::Contains("rank 7 outside world_size 2"));
  j["rank"] = 0;
  j["world_size"] = 2000000000;  // never sized by: refused first
  std::ofstream(dir / "flight" / "rank-00000.json") << j.dump();
  CHECK_THROWS_WITH(flight_report(dir.string()), Catch::Contains("world_size 2000000000 outside"));
  j["world_size"] = 2;
  std::ofstream(dir / "flight" / "rank-00000.json") << j.dump();
  write_record(dir, 1, 3, 1, "data", nlohmann::json::array());
  CHECK_THROWS_WITH(flight_report(dir.string()), Catch::Contains("records of different runs"));
  write_record(dir, 0, 2, 1, "data", nlohmann::json::array());
  fs::copy_file(dir / "flight" / "rank-00000.json", dir / "flight" / "rank-00001.json", fs::copy_options::overwrite_existing);
  CHECK_THROWS_WITH(flight_report(dir.string()), Catch::Contains("are both rank 0"));
  j["rank"] = "zero";
  std::ofstream(dir / "flight" / "rank-00000.json") << j.dump();
  CHECK_THROWS_AS(flight_report(dir.string()), UsageError);
  fs::remove_all(dir);
}

TEST_CASE("failed hosts: lost peers from the records, a slow rank's host from the latest start", "[mpi][flight]") {
  const fs::path dir = ht::test::fresh_temp_dir("ht_flight", "failed");
  CHECK(failed_hosts(dir.string()).empty());  // no record, no metrics: nothing named
  CHECK_THROWS_WITH(failed_hosts((dir / "absent").string()), Catch::Contains("absent: not a directory"));
  // A 6-rank run over node0..node2: ranks 4 and 5 (node2) lost, found by ranks 0 and 1; rank 2
  // found rank 5 only; rank 3 wrote no record; a record from before the field existed has no list.
  auto lost = [](std::initializer_list<int> ranks) {
    nlohmann::json a = nlohmann::json::array();
    for (int r : ranks) a.push_back({{"rank", r}, {"host", "node" + std::to_string(r / 2)}});
    return a;
  };
  for (int r : {0, 1, 2}) {
    write_record(dir, r, 6, 9, "backward", nlohmann::json::array(), "collective time-out: x");
    nlohmann::json j;
    std::ifstream(dir / "flight" / ("rank-0000" + std::to_string(r) + ".json")) >> j;
    j["lost"] = r == 2 ? lost({5}) : lost({4, 5});
    std::ofstream(dir / "flight" / ("rank-0000" + std::to_string(r) + ".json")) << j.dump();
  }
  write_record(dir, 4, 6, 9, "data", nlohmann::json::array());
  auto f = failed_hosts(dir.string());
  REQUIRE(f.size() == 1);
  CHECK(f[0].host == "node2");
  CHECK(f[0].cause == "lost: ranks 4-5 gave no answer to a probe (found by ranks 0-2)");

  // No peer found lost, records from ranks 0-2 and 4 of 6: rank 3 and 5 wrote none; their hosts
  // (the latest run_start's) are named. Not when the hosts do not match the records' world size.
  for (int r : {0, 1, 2}) write_record(dir, r, 6, 9, "backward", nlohmann::json::array(), "stop signal 15");
  std::ofstream(dir / "metrics.jsonl") << R"({"event": "run_start", "time": 1, "hosts": ["a", "a", "b", "b", "c", "c"]})"
                                       << "\n";
  f = failed_hosts(dir.string());
  REQUIRE(f.size() == 2);
  CHECK(f[0].host == "b");
  CHECK(f[0].cause == "no flight record from rank 3 while 4 ranks wrote one (ended without a chance to: its node died, "
                      "or it was killed at once)");
  CHECK((f[1].host == "c" && f[1].cause.rfind("no flight record from rank 5 ", 0) == 0));
  std::ofstream(dir / "metrics.jsonl") << R"({"event": "run_start", "time": 1, "hosts": ["a", "b"]})" << "\n";
  CHECK(failed_hosts(dir.string()).empty());
  // A rank's own error explains the failure: the launcher then kills the others, some before they
  // can write, and their hosts are not named.
  std::ofstream(dir / "metrics.jsonl") << R"({"event": "run_start", "time": 1, "hosts": ["a", "a", "b", "b", "c", "c"]})"
                                       << "\n";
  write_record(dir, 1, 6, 9, "backward", nlohmann::json::array(), "fatal error: injected");
  CHECK(failed_hosts(dir.string()).empty());
  fs::remove(dir / "metrics.jsonl");

  // The slow-rank stop: only the latest start's run_end counts, with its latest slow_rank warning.
  auto metrics = [&](const std::string& text) { std::ofstream(dir / "metrics.jsonl") << text; };
  const std::string start = R"({"event": "run_start", "time": 1, "hosts": ["node0", "node1"]})" "\n";
  const std::string slow1 = R"({"event": "warning", "kind": "slow_rank", "rank": 1, "host": "node1", "time": 2})" "\n";
  const std::string slow3 = R"({"event": "warning", "kind": "slow_rank", "rank": 3, "host": "node7", "time": 3})" "\n";
  const std::string end_slow = R"({"event": "run_end", "status": "slow_rank", "time": 4})" "\n";
  fs::remove_all(dir / "flight");
  metrics(start + slow1 + slow3 + R"({"event": "step", "step": 1, "lo)" "\n" + end_slow);
  f = failed_hosts(dir.string());
  REQUIRE(f.size() == 1);
  CHECK(f[0].host == "node7");
  CHECK(f[0].cause == "slow: rank 3 judged slow until the run stopped (watchdog.slow_rank_stop_windows)");
  metrics(start + slow1 + end_slow + start);  // a later start that has not ended: nothing
  CHECK(failed_hosts(dir.string()).empty());
  metrics(start + slow1 + R"({"event": "run_end", "status": "finished", "time": 4})" "\n");
  CHECK(failed_hosts(dir.string()).empty());
  metrics(start + R"({"event": "warning", "kind": "slow_rank", "rank": 1, "time": 2})" "\n" + end_slow);
  CHECK_THROWS_WITH(failed_hosts(dir.string()), Catch::Contains("metrics.jsonl line 2: slow_rank warning without field 'host'"));
  // A lost host and the slow one together: each once, the lost first.
  metrics(start + slow3 + end_slow);
  write_record(dir, 0, 2, 9, "backward", nlohmann::json::array(), "collective time-out: x");
  nlohmann::json j;
  std::ifstream(dir / "flight" / "rank-00000.json") >> j;
  j["lost"] = lost({3});
  std::ofstream(dir / "flight" / "rank-00000.json") << j.dump();
  f = failed_hosts(dir.string());
  REQUIRE(f.size() == 2);
  CHECK((f[0].host == "node1" && f[0].cause.rfind("lost: rank 3 ", 0) == 0));
  CHECK((f[1].host == "node7" && f[1].cause.rfind("slow: rank 3 ", 0) == 0));
  metrics(start + slow1 + end_slow);  // the slow rank's host also lost: named once, as lost
  f = failed_hosts(dir.string());
  REQUIRE(f.size() == 1);
  CHECK(f[0].cause.rfind("lost: ", 0) == 0);
  j["lost"] = {{{"rank", "three"}}};
  std::ofstream(dir / "flight" / "rank-00000.json") << j.dump();
  CHECK_THROWS_AS(failed_hosts(dir.string()), UsageError);
  fs::remove_all(dir);
}

// Not run in CI (hidden tag): the recorder's cost per wait, for results/cpu/flight_recorder.json.
TEST_CASE("flight recorder: cost of one recorded wait", "[.][bench][flight]") {
  constexpr int n = 2'000'000;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    note_collective_begin("bench wait");
    note_collective_end();
  }
  const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / n;
  WARN("one recorded wait (note_collective_begin + note_collective_end, flight record included): " << ns << " ns");
}
