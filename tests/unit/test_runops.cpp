// The watchdog's judgement, the budget's arithmetic and staging's copy rule (src/train/watchdog.*,
// budget.*, stage.*), without MPI. The script tests (tests/runops/test_runops.py) run them in training.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>

#include "base/error.hpp"
#include "src/train/budget.hpp"
#include "src/train/stage.hpp"
#include "src/train/watchdog.hpp"
#include "temp_dir_util.hpp"

using namespace ht;

namespace {
std::vector<std::string> kinds(const std::vector<WatchdogWarning>& w) {
  std::vector<std::string> k;
  for (const auto& x : w) k.push_back(to_string(x.kind));
  return k;
}
const std::vector<std::string> kHosts = {"n0", "n0", "n1", "n1"};
}  // namespace

TEST_CASE("watchdog: a balanced window warns about nothing", "[watchdog]") {
  Config::Watchdog o;
  std::vector<RankWindow> r(4, RankWindow{100, 5, 20});
  CHECK(judge_window(r, kHosts, 95.0, o, true).empty());
  CHECK(judge_window({RankWindow{100, 5, 0}}, {"n0"}, std::nullopt, o, true).empty());
}

TEST_CASE("watchdog: each condition gives its warning, naming cause and knob", "[watchdog]") {
  Config::Watchdog o;
  SECTION("data loading on every rank") {
    std::vector<RankWindow> r(4, RankWindow{100, 40, 5});
    auto w = judge_window(r, kHosts, std::nullopt, o, true);
    REQUIRE(kinds(w) == std::vector<std::string>{"data_loading"});
    CHECK(w[0].figures["data_share"].get<double>() == Approx(0.4));
    CHECK(w[0].knob.find("data.stage_dir") != std::string::npos);
    // prefetch off: the first knob is to turn it on
    CHECK(judge_window(r, kHosts, std::nullopt, o, false)[0].knob.rfind("data.prefetch = true", 0) == 0);
  }
  SECTION("exposed communication on every rank") {
    std::vector<RankWindow> r(4, RankWindow{100, 2, 60});
    r[2].allreduce_ms = 55;
    auto w = judge_window(r, kHosts, std::nullopt, o, true);
    REQUIRE(kinds(w) == std::vector<std::string>{"exposed_communication"});
    CHECK(w[0].figures["comm_share"].get<double>() == Approx(0.55));
    CHECK(w[0].knob.find("dist.bucket_mb") != std::string::npos);
  }
  SECTION("one slow rank: named with its host; the others' waiting is not blamed on the network") {
    std::vector<RankWindow> r(4, RankWindow{200, 2, 140});  // busy 60 ms, waiting for rank 3
    r[3] = RankWindow{200, 3, 5};                         // busy 195 ms: compute
    auto w = judge_window(r, kHosts, std::nullopt, o, true);
    REQUIRE(kinds(w) == std::vector<std::string>{"slow_rank"});
    CHECK(w[0].figures["rank"] == 3);
    CHECK(w[0].figures["host"] == "n1");
    CHECK(w[0].message.find("compute is slow") != std::string::npos);
    r[3].data_ms = 150;  // now its data loading
    w = judge_window(r, kHosts, std::nullopt, o, true);
    REQUIRE(kinds(w) == std::vector<std::string>{"slow_rank"});
    CHECK(w[0].message.find("data loading is slow") != std::string::npos);
    // Below the spread: nothing.
    o.max_rank_spread = 4;
    CHECK(judge_window(r, kHosts, std::nullopt, o, true).empty());
  }
  SECTION("an idle GPU") {
    std::vector<RankWindow> r(2, RankWindow{100, 5, 10});
    auto w = judge_window(r, kHosts, 40.0, o, true);
    REQUIRE(kinds(w) == std::vector<std::string>{"gpu_idle"});
    CHECK(w[0].figures["gpu_util_pct"] == 40.0);
    CHECK(judge_window(r, kHosts, 70.0, o, true).empty());  // at the threshold: fine
  }
}

TEST_CASE("watchdog: windows, the skipped first step and the rate limit (one rank)", "[watchdog]") {
  Config::Watchdog o;
  o.window_steps = 3;
  o.repeat_minutes = 1;
  Watchdog wd(o, true, 0, 1, {"n0"});
  auto t = SteadyClock::now();
  StepMetrics m;
  m.step_ms = 100;
  m.data_ms = 80;
  int warned = 0;
  std::vector<int64_t> at;
  for (int s = 1; s <= 13; ++s) {
    m.step = s;
    auto w = wd.on_step(m, nullptr, t + std::chrono::seconds(10 * s));  // 10 s per step
    warned += static_cast<int>(w.size());
    if (!w.empty()) at.push_back(s);
  }
  // Step 1 skipped; windows end at steps 4, 7, 10, 13; at most one per 60 s: 4, 10 (7 is 30 s later, 13 is 30 s after 10).
  CHECK(at == std::vector<int64_t>{4, 10});
  CHECK(wd.emitted() == 2);
}

TEST_CASE("budget: spending of earlier starts from metrics.jsonl", "[budget]") {
  auto dir = test::fresh_temp_dir("ht_budget", "prev");
  const std::string p = (dir / "metrics.jsonl").string();
  {
    std::ofstream f(p);
    f << R"({"event":"run_start","time":1000,"world_size":2,"config":"[run]\nfresh = false\n"})" << "\n"
      << R"({"event":"step","time":1500})" << "\n"
      << R"({"event":"step","tim)" << "\n"  // a line cut by a kill
      << R"({"event":"run_start","time":5000,"world_size":4,"config":"[run]\nfresh = false\n"})" << "\n"
      << R"({"event":"run_end","time":5900})" << "\n";
  }
  Spend s = previous_spend(p, 2.0);
  CHECK(s.wall_hours == Approx((500.0 + 900.0) / 3600));
  CHECK(s.gpu_hours == Approx((500.0 * 2 + 900.0 * 4) / 3600));
  CHECK(s.cost == Approx(2 * s.gpu_hours));
  {
    std::ofstream f(p, std::ios::app);  // a start with run.fresh = true begins the run anew
    f << R"({"event":"run_start","time":9000,"world_size":1,"config":"[run]\nfresh = true\n"})" << "\n"
      << R"({"event":"step","time":9360})" << "\n";
  }
  s = previous_spend(p, 2.0);
  CHECK(s.gpu_hours == Approx(0.1));
  CHECK(previous_spend((dir / "none.jsonl").string(), 1).gpu_hours == 0);
}

TEST_CASE("budget: stops while one more step and the checkpoint fit", "[budget]") {
  Config::Run run;
  run.max_cost = 10;
  run.price_per_gpu_hour = 3600;  // 1 per device-second; 4 devices: 4 per second
  Spend prev;
  prev.gpu_hours = 1.0 / 3600;    // 1 device-second spent before: cost 1
  RunBudget b(run, 4, prev);
  auto t0 = SteadyClock::now();
  b.begin(t0);
  b.on_step(500);  // 0.5 s per step: 2 per step
  CHECK(b.spent(t0).cost == Approx(1));
  CHECK_FALSE(b.would_cross(t0 + std::chrono::seconds(1)));           // 1 + 4 + 2 = 7 < 10
  auto why = b.would_cross(t0 + std::chrono::milliseconds(1800));     // 1 + 7.2 + 2 = 10.2
  REQUIRE(why);
  CHECK(why->rfind("run.max_cost = 10 would be crossed", 0) == 0);
  b.set_checkpoint_cost_s(1);                                         // + 4 for the save
  CHECK(b.would_cross(t0 + std::chrono::milliseconds(1000)));          // 1 + 4 + 2 + 4 = 11
  CHECK(b.fields(t0)["cost"].get<double>() == Approx(1));
  CHECK(b.console_text(t0) == " cost 1.00 (0.000278 GPU-h)");
  {
    RunBudget cpu(run, 1, {}, /*gpu=*/false);  // a CPU run says rank-hours, as the report does
    cpu.begin(t0 - std::chrono::seconds(1));
    CHECK(cpu.console_text(t0).find(" rank-h)") != std::string::npos);
  }
  Config::Run none;
  RunBudget u(none, 1);
  CHECK_FALSE(u.limited());
  CHECK_FALSE(u.would_cross(t0 + std::chrono::hours(1000)));
}

TEST_CASE("stage: copies once, keeps identical copies, refuses what does not fit", "[stage]") {
  namespace fs = std::filesystem;
  auto dir = test::fresh_temp_dir("ht_stage", "copy");
  fs::create_directories(dir / "data");
  std::vector<std::string> files;
  for (int i = 0; i < 2; ++i) {
    const auto p = dir / "data" / ("train-0000" + std::to_string(i) + "-of-00002.h5");
    std::ofstream(p) << std::string(1000 + i, 'a' + static_cast<char>(i));
    files.push_back(p.string());
  }
  const std::string target = staged_data_dir((dir / "stage").string(), (dir / "data").string());
  CHECK(fs::path(target).filename().string().rfind("data-", 0) == 0);
  CHECK(target == staged_data_dir((dir / "stage").string(), (dir / "data" / "").string()));
  StageReport r = stage_files(files, target);
  CHECK(r.copied == 2);
  CHECK(r.bytes_copied == 2001);
  CHECK(fs::file_size(fs::path(target) / "train-00001-of-00002.h5") == 1001);
  CHECK(fs::last_write_time(fs::path(target) / "train-00000-of-00002.h5") == fs::last_write_time(files[0]));
  r = stage_files(files, target);
  CHECK(r.copied == 0);
  // A changed source (other mtime) is copied again, even at the same size.
  std::ofstream(files[1]) << std::string(1001, 'z');
  fs::last_write_time(files[1], fs::last_write_time(files[1]) + std::chrono::seconds(5));
  r = stage_files(files, target);
  CHECK(r.copied == 1);
  std::ifstream in(fs::path(target) / "train-00001-of-00002.h5");
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(content == std::string(1001, 'z'));
  // Not enough space: names the directory and the bytes.
  const std::string other = (dir / "stage2").string();
  try {
    stage_files(files, other, 1500);
    FAIL("no error");
  } catch (const UsageError& e) {
    const std::string m = e.what();
    CHECK(m.find("not enough space in " + other) != std::string::npos);
    CHECK(m.find("2001 bytes") != std::string::npos);
    CHECK(m.find("1500 bytes") != std::string::npos);
  }
  CHECK(fs::is_empty(other));
  // Unwritable: a regular file where the directory should be.
  CHECK_THROWS_AS(stage_files(files, files[0] + "/x"), UsageError);
}
