// Dynamic loss scaling (src/train/loss_scaler.hpp): growth, back-off, the bounds, the config check,
// and the scaler's state through a checkpoint file and the rank broadcast, bit for bit.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include "io/checkpoint/checkpoint_store.hpp"
#include "base/error.hpp"
#include "src/train/config.hpp"
#include "src/train/loss_scaler.hpp"
#include "src/train/training_state.hpp"
#include "temp_dir_util.hpp"

using namespace ht;

namespace {
LossScaleConfig small(double initial, int64_t growth, double min, double max) {
  return {.enabled = true, .initial = initial, .growth_interval = growth, .min = min, .max = max};
}

TrainingState minimal_state() {
  TrainingState s;
  Tensor w = Tensor::empty({2});
  w.data<float>()[0] = 1.f;
  w.data<float>()[1] = 2.f;
  s.tensors.emplace_back("param/w", w);
  Tensor m = Tensor::empty({2});
  m.data<float>()[0] = m.data<float>()[1] = 0.f;
  s.tensors.emplace_back("momentum/w", m);
  s.progress.step = 7;
  s.progress.epoch = 0;
  s.progress.step_in_epoch = 9;
  s.progress.nonfinite_total = 2;
  s.world_size = 1;
  s.global_batch = 8;
  s.total_steps = 100;
  s.steps_per_epoch = 50;
  s.model = "mlp";
  return s;
}
}  // namespace

TEST_CASE("loss scaler: doubles after growth_interval clean steps in a row, up to max", "[loss_scale]") {
  LossScaler s(small(1024, 3, 1, 4096));
  CHECK(s.scale() == 1024);
  CHECK(s.inverse() == 1.0f / 1024);
  CHECK(!s.update(false));
  CHECK(!s.update(false));
  CHECK(s.scale() == 1024);
  CHECK(s.state().clean_steps == 2);
  CHECK(!s.update(false));  // the third clean step doubles and restarts the count
  CHECK(s.scale() == 2048);
  CHECK(s.state().clean_steps == 0);
  for (int i = 0; i < 3; ++i) s.update(false);
  CHECK(s.scale() == 4096);
  for (int i = 0; i < 3; ++i) s.update(false);
  CHECK(s.scale() == 4096);  // max
  CHECK(s.state().clean_steps == 0);
}

TEST_CASE("loss scaler: an overflow halves the scale and restarts the clean count, down to min", "[loss_scale]") {
  LossScaler s(small(8, 2, 2, 1 << 20));
  s.update(false);
  CHECK(s.state().clean_steps == 1);
  CHECK(s.update(true));  // backed off
  CHECK(s.scale() == 4);
  CHECK(s.state().clean_steps == 0);
  s.update(false);  // one clean step: no growth yet (the count restarted)
  CHECK(s.scale() == 4);
  CHECK(s.update(true));
  CHECK(s.scale() == 2);
  CHECK(!s.update(true));  // at min: nothing to back off; the step is a real non-finite one
  CHECK(s.scale() == 2);
  CHECK(s.state().clean_steps == 0);
  s.update(false);
  s.update(false);
  CHECK(s.scale() == 4);
}

TEST_CASE("loss scaler: config values must be powers of two in order", "[loss_scale][config]") {
  CHECK(loss_scale_config_problem(LossScaleConfig{}).empty());
  CHECK(loss_scale_config_problem(small(1000, 10, 1, 65536)).find("train.loss_scale.initial = 1000") == 0);
  CHECK(loss_scale_config_problem(small(64, 10, 0, 65536)).find("train.loss_scale.min = 0") == 0);
  CHECK(loss_scale_config_problem(small(64, 10, 1, INFINITY)).find("train.loss_scale.max = inf") == 0);
  CHECK(loss_scale_config_problem(small(64, 10, 128, 65536)).find("must lie in [train.loss_scale.min") != std::string::npos);
  CHECK(loss_scale_config_problem(small(64, 0, 1, 65536)) == "train.loss_scale.growth_interval = 0: must be >= 1");
  CHECK_THROWS_AS(LossScaler(small(3, 1, 1, 4)), UsageError);
  // Through the config parser: exit 2 naming the key.
  try {
    parse_config({"--data.synthetic", "true", "--train.loss_scale.initial", "100"});
    FAIL("accepted");
  } catch (const UsageError& e) {
    CHECK(std::string(e.what()).find("train.loss_scale.initial = 100: must be a positive power of two") != std::string::npos);
  }
  const Config c = parse_config({"--data.synthetic", "true", "--train.loss_scale.enabled", "--train.loss_scale.growth_interval", "5"});
  CHECK(c.train.loss_scale.enabled);
  CHECK(c.train.loss_scale.growth_interval == 5);
  // to_ini round trip ([train] loss_scale.enabled = true).
  const Config back = parse_config_text(to_ini(c), "ini");
  CHECK(back.train.loss_scale.enabled);
  CHECK(back.train.loss_scale.growth_interval == 5);
  CHECK(to_ini(c).find("loss_scale.initial = 65536\n") != std::string::npos);
}

TEST_CASE("loss scaler: restore takes the state bit for bit and refuses a bad one", "[loss_scale]") {
  LossScaler s(small(65536, 2000, 1, 1 << 24));
  s.restore({std::ldexp(1.0, -3), 1999});
  CHECK(s.scale() == 0.125);
  CHECK(!s.update(false));
  CHECK(s.scale() == 0.25);  // the restored count carried on
  CHECK_THROWS_AS(s.restore({3.0, 0}), UsageError);
  CHECK_THROWS_AS(s.restore({4.0, -1}), UsageError);
  CHECK_THROWS_AS(s.restore({NAN, 0}), UsageError);
}

TEST_CASE("loss scaler: state through a checkpoint file and the broadcast bytes", "[loss_scale][checkpoint]") {
  const auto dir = test::fresh_temp_dir("ht_loss_scale", "roundtrip");
  const std::string path = (dir / "step-00000007.h5").string();
  TrainingState s = minimal_state();
  s.loss_scale = LossScaleState{std::ldexp(1.0, 20), 1234};
  CheckpointData d = to_checkpoint_data(s);
  CHECK(d.floats.at("loss_scale") == std::ldexp(1.0, 20));
  CHECK(d.ints.at("loss_scale_clean_steps") == 1234);
  write_checkpoint_file(path, d);
  const TrainingState back = training_state_from_checkpoint(read_checkpoint_file(path), path);
  REQUIRE(back.loss_scale);
  CHECK(*back.loss_scale == *s.loss_scale);
  const TrainingState sent = deserialize_training_state(serialize_training_state(s));
  REQUIRE(sent.loss_scale);
  CHECK(std::memcmp(&sent.loss_scale->scale, &s.loss_scale->scale, sizeof(double)) == 0);
  CHECK(sent.loss_scale->clean_steps == 1234);
  // A run without scaling writes floats/loss_scale = 1 and no clean count, as earlier builds did,
  // and reads back no scaler state (the next run with scaling starts at its initial scale).
  TrainingState plain = minimal_state();
  CheckpointData pd = to_checkpoint_data(plain);
  CHECK(pd.floats.at("loss_scale") == 1.0);
  CHECK(pd.ints.count("loss_scale_clean_steps") == 0);
  CHECK(!training_state_from_checkpoint(pd, "x").loss_scale);
  CHECK(!deserialize_training_state(serialize_training_state(plain)).loss_scale);
  std::filesystem::remove_all(dir);
}

TEST_CASE("loss scaler: checkpoint validation of the scaler's fields", "[loss_scale][checkpoint]") {
  TrainingState s = minimal_state();
  s.loss_scale = LossScaleState{1024, 3};
  CheckpointLayout l = checkpoint_layout_of(to_checkpoint_data(s));
  CHECK(checkpoint_counters_problem(l).empty());
  l.ints["loss_scale_clean_steps"] = -1;
  CHECK(checkpoint_counters_problem(l) == "ints/loss_scale_clean_steps = -1 is negative");
  l.ints["loss_scale_clean_steps"] = 3;
  l.floats["loss_scale"] = 1000;
  CHECK(checkpoint_counters_problem(l).find("floats/loss_scale = 1000") == 0);
  l.floats.erase("loss_scale");
  CHECK(checkpoint_counters_problem(l).find("dataset /floats/loss_scale is missing") == 0);
}
