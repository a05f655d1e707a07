// CheckpointSchedule (src/train/checkpoint_schedule.hpp): which step boundaries checkpoint, and why.
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>

#include "base/error.hpp"
#include "src/train/checkpoint_schedule.hpp"

using namespace ht;
using Clock = CheckpointSchedule::Clock;
using std::chrono::seconds;

TEST_CASE("checkpoint interval: Daly's sqrt(2 C M) - C, Young's sqrt(2 C M) once C reaches M/2",
          "[checkpoint][schedule]") {
  CHECK(checkpoint_interval_s(10, 3600) == Approx(std::sqrt(72000.0) - 10));
  CHECK(checkpoint_interval_s(0.5, 60 * 60) == Approx(59.5));
  CHECK(checkpoint_interval_s(60, 3600) == Approx(std::sqrt(432000.0) - 60));  // tests/slurm/test_scaling_model.py
  CHECK(checkpoint_interval_s(1799, 3600) == Approx(std::sqrt(2.0 * 1799 * 3600) - 1799));
  CHECK(checkpoint_interval_s(1800, 3600) == Approx(3600.0));
  CHECK(checkpoint_interval_s(7200, 3600) == Approx(7200.0));
  CHECK_THROWS_AS(checkpoint_interval_s(0, 10), UsageError);
  CHECK_THROWS_AS(checkpoint_interval_s(1, 0), UsageError);
}

TEST_CASE("checkpoint schedule: nothing configured never checkpoints", "[checkpoint][schedule]") {
  const auto t0 = Clock::now();
  CheckpointSchedule s(0, 0, 0, t0);
  CHECK(s.interval_s() == 0);
  CHECK_FALSE(s.time_due(t0 + seconds(100000)));
  for (int64_t step : {1, 2, 10, 1000}) CHECK_FALSE(s.decide(step, false));
  CHECK_FALSE(s.record_cost(2.0));  // no Young/Daly: costs change nothing
  CHECK(s.interval_s() == 0);
}

TEST_CASE("checkpoint schedule: every_steps checkpoints on multiples only", "[checkpoint][schedule]") {
  CheckpointSchedule s(5, 0, 0, Clock::now());
  for (int64_t step = 1; step <= 20; ++step) {
    INFO("step " << step);
    auto r = s.decide(step, false);
    if (step % 5 == 0) {
      REQUIRE(r);
      CHECK(*r == CheckpointReason::every_steps);
    } else {
      CHECK_FALSE(r);
    }
  }
}

TEST_CASE("checkpoint schedule: every_minutes is due from the start, then from the last save",
          "[checkpoint][schedule]") {
  const auto t0 = Clock::now();
  CheckpointSchedule s(0, 2.0, 0, t0);
  CHECK(s.interval_s() == 120.0);
  CHECK_FALSE(s.time_due(t0 + seconds(119)));
  CHECK(s.time_due(t0 + seconds(120)));
  auto r = s.decide(7, true);
  REQUIRE(r);
  CHECK(*r == CheckpointReason::every_minutes);
  s.mark_saved(t0 + seconds(125));
  CHECK_FALSE(s.time_due(t0 + seconds(244)));
  CHECK(s.time_due(t0 + seconds(245)));
}

TEST_CASE("checkpoint schedule: a due time comes before every_steps, which applies otherwise",
          "[checkpoint][schedule]") {
  CheckpointSchedule s(4, 1.0, 0, Clock::now());
  CHECK(*s.decide(4, true) == CheckpointReason::every_minutes);
  CHECK(*s.decide(8, false) == CheckpointReason::every_steps);
  CHECK(*s.decide(9, true) == CheckpointReason::every_minutes);
  CHECK_FALSE(s.decide(9, false));
}

TEST_CASE("checkpoint schedule: Young/Daly measures once, then sqrt(2 C M) - C from the running mean cost",
          "[checkpoint][schedule]") {
  const auto t0 = Clock::now();
  CheckpointSchedule s(3, 0, 60.0, t0);  // MTBF 60 min = 3600 s
  CHECK(s.interval_s() == 0);
  CHECK_FALSE(s.time_due(t0 + seconds(100000)));  // no interval before the first cost
  // The first boundary that may checkpoint measures, whatever else applies; only once.
  auto r = s.decide(1, false);
  REQUIRE(r);
  CHECK(*r == CheckpointReason::young_daly_measure);
  CHECK_FALSE(s.decide(2, false));
  CHECK(*s.decide(3, false) == CheckpointReason::every_steps);
  // First cost 0.5 s: interval sqrt(2 x 0.5 x 3600) - 0.5 = 59.5 s, announced.
  auto c1 = s.record_cost(0.5);
  REQUIRE(c1);
  CHECK(c1->cost_s == Approx(0.5));
  CHECK(c1->interval_s == Approx(59.5));
  CHECK(s.interval_s() == Approx(59.5));
  // A due interval is now a "young_daly" checkpoint.
  s.mark_saved(t0);
  CHECK_FALSE(s.time_due(t0 + seconds(59)));
  CHECK(s.time_due(t0 + seconds(60)));
  CHECK(*s.decide(4, true) == CheckpointReason::young_daly);
  // Running mean: (0.5 + 0.6) / 2 = 0.55 -> sqrt(3960) - 0.55 = 62.4 s: within 20 %, not announced.
  CHECK_FALSE(s.record_cost(0.6));
  CHECK(s.cost_s() == Approx(0.55));
  CHECK(s.interval_s() == Approx(std::sqrt(2 * 0.55 * 3600) - 0.55));
  // (0.55 + 2.45) / 2 = 1.5 -> sqrt(10800) - 1.5 = 102.4 s: more than 20 % longer, announced.
  auto c3 = s.record_cost(2.45);
  REQUIRE(c3);
  CHECK(c3->cost_s == Approx(1.5));
  CHECK(c3->interval_s == Approx(std::sqrt(10800.0) - 1.5));
}

TEST_CASE("checkpoint schedule: Young/Daly replaces every_minutes once measured", "[checkpoint][schedule]") {
  CheckpointSchedule s(0, 10.0, 30.0, Clock::now());
  CHECK(s.interval_s() == 600.0);  // every_minutes until the first cost is known
  CHECK(*s.decide(1, true) == CheckpointReason::young_daly_measure);
  CHECK(*s.decide(2, true) == CheckpointReason::young_daly);  // the rule's name follows mtbf_minutes
  auto c = s.record_cost(2.0);                // sqrt(2 x 2 x 1800) - 2 = 82.9 s
  REQUIRE(c);
  CHECK(s.interval_s() == Approx(std::sqrt(7200.0) - 2));
  CHECK_THROWS_AS(s.record_cost(-2.0), UsageError);  // mean 0: not a positive cost
}
