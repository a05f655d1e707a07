#include <catch2/catch.hpp>

#include "src/train/step_metrics.hpp"

using namespace ht;

TEST_CASE("step_metrics: the metrics.jsonl step record carries every figure under its documented name", "[metrics]") {
  StepMetrics m;
  m.step = 12;
  m.epoch = 2;
  m.loss = 0.75;
  m.lr = static_cast<double>(0.05f);
  // Each timing field, the name it is written under and a distinct value.
  const struct {
    double StepMetrics::*field;
    const char* name;
    double value;
  } timings[] = {{&StepMetrics::data_ms, "data_ms", 1.5},          {&StepMetrics::forward_ms, "forward_ms", 2.5},
                 {&StepMetrics::backward_ms, "backward_ms", 3.5},  {&StepMetrics::allreduce_ms, "allreduce_ms", 0.25},
                 {&StepMetrics::optimizer_ms, "optimizer_ms", 0.5}, {&StepMetrics::step_ms, "step_ms", 8.25}};
  for (const auto& t : timings) m.*t.field = t.value;
  m.images_per_s = 128 / (8.25 / 1000);
  const nlohmann::json j = step_record(m);
  CHECK(j.size() == 13);
  CHECK(j["event"] == "step");
  CHECK(j["step"] == 12);
  CHECK(j["epoch"] == 2);
  CHECK(j["loss"] == 0.75);
  CHECK(j["lr"].get<double>() == static_cast<double>(0.05f));
  CHECK(j["skipped"] == false);
  for (const auto& t : timings) {
    INFO(t.name);
    CHECK(j[t.name] == t.value);
  }
  CHECK(j["images_per_s"].get<double>() == 128 / (8.25 / 1000));
  CHECK_FALSE(j.contains("replicas_identical"));
  CHECK_FALSE(j.contains("gpu_util_pct"));
}

TEST_CASE("step_metrics: a skipped step has a null loss, the replica check and NVML fields appear when set", "[metrics]") {
  StepMetrics m;
  m.step = 4;
  m.epoch = 1;
  m.skipped = true;
  m.replicas_identical = true;
  m.gpu.valid = true;
  m.gpu.gpu_util_pct = 97;
  m.gpu.memory_used_bytes = 1ull << 30;
  m.gpu.power_w = 350.5;
  const nlohmann::json j = step_record(m);
  CHECK(j["loss"].is_null());
  CHECK(j["skipped"] == true);
  CHECK(j["optimizer_ms"] == 0.0);
  CHECK(j["replicas_identical"] == true);
  CHECK(j["gpu_util_pct"] == 97.0);
  CHECK(j["gpu_memory_used_bytes"] == static_cast<double>(1ull << 30));
  CHECK(j["gpu_power_w"] == 350.5);
  CHECK(j.size() == 14 + m.gpu.fields().size());
}
