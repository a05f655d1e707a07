// Trace recorder (mpi/trace.hpp) in one process: spans, nesting, the Chrome trace file, and the cost of
// a span with tracing off and on (printed; the issue asks for the overhead to be measured).
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "mpi/trace.hpp"

using namespace ht;

TEST_CASE("trace: disabled records nothing and writes nothing", "[trace]") {
  Trace t;
  { TraceSpan s(t, "forward"); }
  CHECK(t.events().empty());
  auto dir = std::filesystem::temp_directory_path() / "ht_trace_off";
  std::filesystem::remove_all(dir);
  CHECK(t.write(dir.string()) == 0);
  CHECK_FALSE(std::filesystem::exists(dir / "trace.json"));
}

TEST_CASE("trace: nested spans and the Chrome trace file", "[trace]") {
  Trace t;
  t.enable_local();
  t.set_thread_name("main");
  {
    TraceSpan step(t, "step");
    {
      TraceSpan f(t, "forward");
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    {
      TraceSpan b(t, "allreduce", "comm", 3);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  std::thread([&] {
    t.set_thread_name("gradients");
    TraceSpan s(t, "bucket", "comm", 0);
  }).join();
  auto ev = t.events();
  REQUIRE(ev.size() == 4);
  // Completed in order forward, allreduce, step (destructor order), then the other thread's span.
  CHECK(ev[0].name == "forward");
  CHECK(ev[1].name == "allreduce");
  CHECK(ev[1].index == 3);
  CHECK(ev[2].name == "step");
  CHECK(ev[0].dur_us >= 2000);
  CHECK(ev[2].begin_us <= ev[0].begin_us);
  CHECK(ev[2].begin_us + ev[2].dur_us >= ev[1].begin_us + ev[1].dur_us);
  CHECK(ev[1].begin_us >= ev[0].begin_us + ev[0].dur_us);
  CHECK(ev[3].tid != ev[0].tid);

  auto dir = std::filesystem::temp_directory_path() / "ht_trace_on";
  std::filesystem::remove_all(dir);
  t.write(dir.string());
  std::ifstream f(dir / "trace.json");
  REQUIRE(f);
  auto j = nlohmann::json::parse(f);
  int x = 0, meta = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "X") {
      ++x;
      CHECK(e["pid"] == 0);
      CHECK(e.contains("ts"));
      CHECK(e.contains("dur"));
    } else if (e["ph"] == "M") {
      ++meta;
    }
  }
  CHECK(x == 4);
  CHECK(meta == 4);  // process_name, process_sort_index, two thread names
  CHECK_FALSE(std::filesystem::exists(dir / "trace.json.tmp"));
}

TEST_CASE("trace: cost per span off and on", "[trace][overhead]") {
  const int n = 200000;
  Trace off, on;
  on.enable_local();
  auto time_ns = [&](Trace& t) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) TraceSpan s(t, "span");
    return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / n;
  };
  double ns_off = time_ns(off), ns_on = time_ns(on);
  std::printf("trace overhead: %.1f ns per span disabled, %.1f ns per span enabled\n", ns_off, ns_on);
  CHECK(on.events().size() == static_cast<size_t>(n));
  CHECK(off.events().empty());
  // A training step records ~10 + buckets spans and lasts milliseconds or more: both costs are far below
  // 2% of a step. Loose bounds so a loaded CI machine does not fail the test.
  CHECK(ns_off < 50);
  CHECK(ns_on < 5000);
}
