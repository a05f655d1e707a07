// TrainingState (src/train/training_state.hpp): the mapping to the checkpoint file's keys, the byte
// form broadcast to other ranks, and the head parameters --reset-head leaves as initialised.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>
#include <tuple>
#include <unistd.h>

#include "io/checkpoint/checkpoint_store.hpp"
#include "base/error.hpp"
#include "src/train/training_state.hpp"

namespace fs = std::filesystem;
using namespace ht;

namespace {

Tensor filled(std::vector<int64_t> shape, float start) {
  Tensor t = Tensor::empty(std::move(shape));
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = start + 0.25f * static_cast<float>(i);
  return t;
}

TrainingState sample_state() {
  TrainingState s;
  s.tensors.emplace_back("param/fc.weight", filled({3, 2}, 1.f));
  s.tensors.emplace_back("param/fc.bias", filled({3}, -2.f));
  s.tensors.emplace_back("buffer/bn.running_mean", filled({2}, 0.5f));
  s.tensors.emplace_back("momentum/fc.weight", filled({3, 2}, 7.f));
  s.progress.step = 40;
  s.progress.epoch = 3;
  s.progress.step_in_epoch = 4;
  s.progress.nonfinite_in_row = 1;
  s.progress.nonfinite_total = 5;
  s.progress.epoch_offset = 5;  // 40 + 5 steps done = 3 epochs x 12 + 4 + 5
  s.world_size = 4;
  s.seed = 1234567890123ull;
  s.global_batch = 256;
  s.total_steps = 120;
  s.steps_per_epoch = 12;
  s.lr = 0.0375;
  s.model = "mlp";
  s.config = "[model]\nname = mlp\n";
  s.config_hash = "0123456789abcdef";
  return s;
}

void require_same_tensor(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  REQUIRE(a.dtype() == b.dtype());
  for (int64_t i = 0; i < a.numel(); ++i) REQUIRE(a.data<float>()[i] == b.data<float>()[i]);
}

void require_same(const TrainingState& a, const TrainingState& b) {
  REQUIRE(a.tensors.size() == b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    REQUIRE(a.tensors[i].first == b.tensors[i].first);
    require_same_tensor(a.tensors[i].second, b.tensors[i].second);
  }
  CHECK(a.progress == b.progress);
  // The rest by concern (Catch prints only "{?}" for a tuple: the INFO names the fields).
  INFO("world_size, seed, global_batch, total_steps, steps_per_epoch, lr");
  CHECK(std::tie(a.world_size, a.seed, a.global_batch, a.total_steps, a.steps_per_epoch, a.lr) ==
        std::tie(b.world_size, b.seed, b.global_batch, b.total_steps, b.steps_per_epoch, b.lr));
  INFO("loss_scale, train_loss, test_top1, test_loss, model, config, config_hash");
  CHECK(std::tie(a.loss_scale, a.train_loss, a.test_top1, a.test_loss, a.model, a.config, a.config_hash) ==
        std::tie(b.loss_scale, b.train_loss, b.test_top1, b.test_loss, b.model, b.config, b.config_hash));
}

}  // namespace

TEST_CASE("checkpoint training state: the file keys are exactly those of the format", "[checkpoint][state]") {
  CheckpointData d = to_checkpoint_data(sample_state());
  CHECK(d.ints == std::map<std::string, int64_t>{{"step", 40},
                                                 {"epoch", 3},
                                                 {"step_in_epoch", 4},
                                                 {"world_size", 4},
                                                 {"seed", 1234567890123},
                                                 {"global_batch", 256},
                                                 {"total_steps", 120},
                                                 {"steps_per_epoch", 12},
                                                 {"nonfinite_in_row", 1},
                                                 {"nonfinite_total", 5},
                                                 {"epoch_offset", 5}});
  CHECK(d.floats == std::map<std::string, double>{{"lr", 0.0375}, {"loss_scale", 1.0}});
  CHECK(d.strings == std::map<std::string, std::string>{
                         {"model", "mlp"}, {"config", "[model]\nname = mlp\n"}, {"config_hash", "0123456789abcdef"}});
  REQUIRE(d.tensors.size() == 4);
  CHECK(d.tensors[0].first == "param/fc.weight");
  CHECK(d.tensors[3].first == "momentum/fc.weight");
  CHECK(d.find("buffer/bn.running_mean")->data<float>()[1] == 0.75f);
}

TEST_CASE("checkpoint training state: round trip through a checkpoint file", "[checkpoint][state]") {
  fs::path dir = fs::temp_directory_path() / ("ht_state_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "s.h5").string();
  write_checkpoint_file(path, to_checkpoint_data(sample_state()));
  TrainingState back = training_state_from_checkpoint(read_checkpoint_file(path), path);
  require_same(sample_state(), back);
  fs::remove_all(dir);
}

TEST_CASE("checkpoint training state: absent keys", "[checkpoint][state]") {
  CheckpointData d;
  d.tensors.emplace_back("param/w", filled({2}, 1.f));
  d.ints = {{"step", 9}};
  // Resuming needs the progress, and the error names the file and the key.
  try {
    training_state_from_checkpoint(d, "/x/step-9.h5");
    FAIL("no error");
  } catch (const UsageError& e) {
    CHECK(std::string(e.what()) == "/x/step-9.h5: field ints/epoch is missing");
  }
  // --init-from needs only the tensors; the rest keeps the defaults.
  TrainingState s = training_state_from_checkpoint(d, "/x/step-9.h5", /*require_progress=*/false);
  CHECK(s.progress.step == 9);
  CHECK(s.progress.epoch == 0);
  CHECK(s.world_size == 0);
  CHECK(s.model == "?");
  CHECK(!s.loss_scale);
  CHECK(s.config.empty());
  REQUIRE(s.find("param/w"));
  CHECK(s.find("param/w")->data<float>()[1] == 1.25f);
  CHECK(s.find("param/none") == nullptr);
}

TEST_CASE("checkpoint training state: bytes for the broadcast round-trip exactly", "[checkpoint][state]") {
  TrainingState s = sample_state();
  s.tensors.emplace_back("param/scalar", filled({}, 3.f));
  s.tensors.emplace_back("param/empty", Tensor::empty({0, 4}));
  std::vector<char> b = serialize_training_state(s);
  size_t payload = 0;
  for (auto& [n, t] : s.tensors) payload += t.nbytes();
  CHECK(b.size() > payload);
  require_same(s, deserialize_training_state(b));
  // A truncated or padded message is an error, not a short state.
  CHECK_THROWS_AS(deserialize_training_state(std::span<const char>(b.data(), b.size() - 1)), RuntimeError);
  CHECK_THROWS_AS(deserialize_training_state(std::span<const char>(b.data(), 20)), RuntimeError);
  b.push_back(0);
  CHECK_THROWS_AS(deserialize_training_state(b), RuntimeError);
  require_same(TrainingState{}, deserialize_training_state(serialize_training_state(TrainingState{})));
}

TEST_CASE("checkpoint training state: how the run was doing travels through the file and the broadcast",
          "[checkpoint][state]") {
  TrainingState s = sample_state();
  s.train_loss = 0.4375;
  s.test_top1 = 0.8125;
  s.test_loss = 0.5625;
  s.loss_scale = LossScaleState{1024.0, 17};
  CheckpointData d = to_checkpoint_data(s);
  CHECK(d.floats == std::map<std::string, double>{{"lr", 0.0375},
                                                  {"loss_scale", 1024.0},
                                                  {"train_loss", 0.4375},
                                                  {"test_top1", 0.8125},
                                                  {"test_loss", 0.5625}});
  CHECK(d.ints.at("loss_scale_clean_steps") == 17);
  require_same(s, training_state_from_checkpoint(std::move(d), "mem"));
  require_same(s, deserialize_training_state(serialize_training_state(s)));
  // Absent in the file: absent in the state, not zero.
  s.test_top1.reset();
  s.test_loss.reset();
  TrainingState back = deserialize_training_state(serialize_training_state(s));
  CHECK(!back.test_top1);
  CHECK(!back.test_loss);
  CHECK(back.train_loss == 0.4375);
}

TEST_CASE("checkpoint training state: the ints a resume needs are the file format's", "[checkpoint][state]") {
  // Each is a field of the state: a complete state's file holds it.
  const std::vector<std::string> fields = training_state_resume_ints();
  CHECK(fields.size() == std::size(kCheckpointResumeInts));
  const CheckpointData full = to_checkpoint_data(sample_state());
  for (const std::string& key : fields) CHECK(full.ints.count(key) == 1);
  // Each one is required when resuming: drop it from a complete file and the error names it.
  for (const std::string& key : fields) {
    CheckpointData d = to_checkpoint_data(sample_state());
    d.ints.erase(key);
    try {
      training_state_from_checkpoint(d, "/r/step-40.h5");
      FAIL("no error without ints/" << key);
    } catch (const UsageError& e) {
      CHECK(std::string(e.what()) == "/r/step-40.h5: field ints/" + key + " is missing");
    }
  }
}

TEST_CASE("checkpoint training state: the head's parameter names (--reset-head)", "[checkpoint][state]") {
  REQUIRE(head_param_names({"conv1.weight", "bn1.weight", "fc.weight", "fc.bias"}, {4, 1, 2, 1}) ==
          std::vector<std::string>{"fc.weight", "fc.bias"});
  REQUIRE(head_param_names({"fc1.weight", "fc1.bias", "fc3.weight", "fc3.bias"}, {2, 1, 2, 1}) ==
          std::vector<std::string>{"fc3.weight", "fc3.bias"});
  REQUIRE(head_param_names({"fc.weight"}, {2}) == std::vector<std::string>{"fc.weight"});
  REQUIRE(head_param_names({"conv.weight"}, {4}).empty());
}

TEST_CASE("checkpoint training state: per-rank buffers travel bitwise through a version-2 file and the broadcast",
          "[checkpoint][state]") {
  TrainingState s = sample_state();
  s.world_size = 2;
  CHECK_FALSE(has_rank_buffers(s));
  CHECK(checkpoint_version_for(to_checkpoint_data(s)) == 1);
  Tensor r0 = filled({2}, 0.5f), r1 = filled({2}, 0.5f);
  r0.data<float>()[0] = -0.0f;                  // the sign of zero survives
  r1.data<float>()[1] = 1.0000001f;             // a last-bit difference survives
  s.tensors.emplace_back(rank_buffer_name(0, "bn.running_mean"), r0);
  s.tensors.emplace_back(rank_buffer_name(1, "bn.running_mean"), r1);
  CHECK(s.tensors.back().first == "rank_buffer/1/bn.running_mean");
  CHECK(has_rank_buffers(s));
  require_same(s, deserialize_training_state(serialize_training_state(s)));

  fs::path dir = fs::temp_directory_path() / ("ht_state_rb_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "s.h5").string();
  write_checkpoint_file(path, to_checkpoint_data(s));
  CheckpointData d = read_checkpoint_file(path);
  CHECK(d.version == 2);
  TrainingState back = training_state_from_checkpoint(std::move(d), path);
  require_same(s, back);
  CHECK(std::signbit(back.find("rank_buffer/0/bn.running_mean")->data<float>()[0]));
  fs::remove_all(dir);
}

TEST_CASE("checkpoint training state: -0.0f is the identity the per-rank gather relies on", "[checkpoint][state]") {
  // capture_state gathers with one reduce_sum in which every slot holds one rank's value and -0.0f
  // from every other rank: x + -0.0f must be x bit for bit, whatever x and the summation order.
  auto bits = [](float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
  };
  volatile float neg_zero = -0.0f;
  for (float x : {0.0f, -0.0f, 1.0f, -3.5e-38f, 1e-45f, std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(), 0.1f}) {
    CHECK(bits(x + neg_zero) == bits(x));
    CHECK(bits(neg_zero + x) == bits(x));
    CHECK(bits((neg_zero + neg_zero) + x) == bits(x));
  }
}
