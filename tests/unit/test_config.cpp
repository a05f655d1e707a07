#include <catch2/catch.hpp>

#include <algorithm>

#include "src/train/config.hpp"
#include "src/train/sgd.hpp"
#include "base/error.hpp"

using namespace ht;

TEST_CASE("config: flags override INI text and every key round-trips through to_ini", "[config]") {
  Config c = parse_config({"--data.synthetic", "--optim.lr", "0.25", "--train.global_batch", "64"});
  CHECK(c.optim.lr == 0.25f);
  CHECK(c.train.global_batch == 64);
  CHECK(c.data.synthetic);
  Config back = parse_config_text(to_ini(c), "round-trip");
  CHECK(to_ini(back) == to_ini(c));
  CHECK(back.optim.lr == 0.25f);
}

TEST_CASE("config: unknown keys name the key and the closest valid one", "[config]") {
  try {
    parse_config({"--data.synthetic", "--optim.lrr", "0.1"});
    FAIL("no error for an unknown key");
  } catch (const UsageError& e) {
    std::string m = e.what();
    CHECK(m.find("optim.lrr") != std::string::npos);
    CHECK(m.find("optim.lr'") != std::string::npos);
  }
  try {
    parse_config_text("[data]\nsynthetic = true\n[train]\nglobal_bach = 3\n", "my.ini");
    FAIL("no error for an unknown key");
  } catch (const UsageError& e) {
    std::string m = e.what();
    CHECK(m.find("my.ini") != std::string::npos);
    CHECK(m.find("train.global_bach") != std::string::npos);
    CHECK(m.find("train.global_batch") != std::string::npos);
  }
}

TEST_CASE("config: invalid values name key and value", "[config]") {
  CHECK_THROWS_WITH(parse_config({"--data.synthetic", "--model.name", "vgg"}),
                    Catch::Contains("model.name = vgg"));
  CHECK_THROWS_WITH(parse_config({"--data.synthetic", "--train.global_batch", "0"}),
                    Catch::Contains("train.global_batch = 0"));
  std::vector<std::string> extra;
  Config c = parse_config({"--data.synthetic", "--init-from", "x.h5"}, &extra);
  REQUIRE(extra.size() == 2);
  CHECK(extra[0] == "--init-from");
}

TEST_CASE("config: device, precision and schedule parse once into enums and print as they were given", "[config]") {
  Config d = parse_config({"--data.synthetic"});
  CHECK(d.train.device == DeviceChoice::automatic);
  CHECK(d.train.precision == Precision::fp32);
  CHECK(d.optim.schedule == LrSchedule::cosine);
  const std::string di = to_ini(d);
  CHECK(di.find("device = auto\n") != std::string::npos);
  CHECK(di.find("precision = fp32\n") != std::string::npos);
  CHECK(di.find("schedule = cosine\n") != std::string::npos);

  Config c = parse_config({"--data.synthetic", "--train.device", "cuda", "--train.precision", "tf32", "--optim.schedule",
                           "step"});
  CHECK(c.train.device == DeviceChoice::cuda);
  CHECK(c.train.precision == Precision::tf32);
  CHECK(c.optim.schedule == LrSchedule::step);
  Config back = parse_config_text(to_ini(c), "round-trip");
  CHECK(back.train.device == DeviceChoice::cuda);
  CHECK(back.train.precision == Precision::tf32);
  CHECK(back.optim.schedule == LrSchedule::step);
  CHECK(to_ini(back) == to_ini(c));
  CHECK(parse_config({"--data.synthetic", "--train.device", "cpu"}).train.device == DeviceChoice::cpu);
  CHECK(parse_config({"--data.synthetic", "--optim.schedule", "constant"}).optim.schedule == LrSchedule::constant);
  CHECK(std::string(to_string(DeviceChoice::automatic)) == "auto");
  CHECK(std::string(to_string(Precision::bf16)) == "bf16");
  CHECK(std::string(to_string(LrSchedule::cosine)) == "cosine");
}

TEST_CASE("config: a bad enum value names the key, the value and the choices; bf16/fp16 are accepted", "[config]") {
  CHECK_THROWS_WITH(parse_config({"--data.synthetic", "--train.device", "gpu"}),
                    "command line: train.device = gpu: must be one of cpu, cuda, auto");
  CHECK_THROWS_WITH(parse_config({"--data.synthetic", "--train.precision", "fp8"}),
                    "command line: train.precision = fp8: must be one of fp32, tf32, bf16, fp16");
  CHECK_THROWS_WITH(parse_config({"--data.synthetic", "--optim.schedule", "linear"}),
                    "command line: optim.schedule = linear: must be one of constant, step, cosine");
  // Whether the device can run them is decided when the model is built (src/train/precision.hpp).
  CHECK(parse_config({"--data.synthetic", "--train.precision", "bf16"}).train.precision == Precision::bf16);
  CHECK(parse_config_text("[data]\nsynthetic = true\n[train]\nprecision = fp16\n", "my.ini").train.precision ==
        Precision::fp16);
}

TEST_CASE("config: no test-only keys (faults come from HT_TEST_FAULTS, base/test_faults.hpp)", "[config]") {
  const std::vector<std::string> removed = {"train.fail_at_step", "train.fail_rank", "train.nan_at_step",
                                            "train.nan_rank", "checkpoint.test_write_delay_ms",
                                            "checkpoint.test_signal_at_step", "checkpoint.test_signal_rank"};
  const auto keys = config_keys();
  const std::string ini = to_ini(parse_config({"--data.synthetic"}));
  for (const auto& k : removed) {
    CHECK(std::find(keys.begin(), keys.end(), k) == keys.end());
    CHECK(ini.find(k.substr(k.find('.') + 1)) == std::string::npos);
    CHECK_THROWS_WITH(parse_config({"--data.synthetic", "--" + k, "3"}),
                      Catch::Contains("unknown config key '" + k + "'"));
  }
  CHECK(ini.find("\ntest_") == std::string::npos);
}

TEST_CASE("config: the schedule enum drives learning_rate", "[config]") {
  Config::Optim o;
  o.lr = 0.5f;
  o.min_lr = 0.1f;
  o.step_epochs = 2;
  o.step_gamma = 0.5f;
  o.schedule = LrSchedule::constant;
  CHECK(learning_rate(o, 7, 10, 2) == 0.5f);
  o.schedule = LrSchedule::step;  // step 7 of 2 steps/epoch = epoch 3: one decay
  CHECK(learning_rate(o, 7, 10, 2) == 0.25f);
  CHECK(learning_rate(o, 8, 10, 2) == 0.125f);  // epoch 4: two decays
  o.schedule = LrSchedule::cosine;
  CHECK(learning_rate(o, 0, 10, 2) == 0.5f);
  CHECK(learning_rate(o, 5, 10, 2) == Approx(0.3f));
  CHECK(learning_rate(o, 10, 10, 2) == Approx(0.1f));
}

TEST_CASE("closest_key suggests what a person meant, including names from other trainers", "[config]") {
  CHECK(closest_key("optim.learnig_rate") == "optim.lr");
  CHECK(closest_key("optim.learning_rate") == "optim.lr");
  CHECK(closest_key("train.batch_size") == "train.global_batch");
  CHECK(closest_key("num_epochs") == "train.epochs");
  CHECK(closest_key("train.epoch") == "train.epochs");      // a plain typo still finds the key
  CHECK(closest_key("optim.momentun") == "optim.momentum");
  CHECK(closest_key("lr") == "optim.lr");
}

TEST_CASE("config: every numeric key has a range; 0, -1 and a huge value are accepted inside it or refused naming the key",
          "[config]") {
  int numeric = 0;
  for (const ConfigKey& k : config_key_table()) {
    if (k.type != "int" && k.type != "float") {
      CHECK(k.range.empty());
      continue;
    }
    ++numeric;
    INFO("key " << k.name << " range " << k.range);
    REQUIRE_FALSE(k.range.empty());
    for (const char* v : {"0", "-1", "1e30", "-1e30", "nan", "inf", "twelve"}) {
      INFO("value " << v);
      try {
        const Config c = parse_config({"--data.synthetic", "--" + k.name, v});
        // Accepted only where it is in range (the generic check runs last; the huge, non-finite and
        // non-numeric values are outside every range).
        CHECK(to_ini(c).find(k.name.substr(k.name.find('.') + 1) + " = ") != std::string::npos);
        CHECK(std::string(v) != "1e30");
        CHECK(std::string(v) != "-1e30");
        CHECK(std::string(v) != "inf");
        CHECK(std::string(v) != "nan");
        CHECK(std::string(v) != "twelve");
      } catch (const UsageError& e) {
        const std::string m = e.what();
        CHECK(m.find(k.name + " = ") != std::string::npos);  // names the key and the value, then why
      }
    }
  }
  CHECK(numeric >= 50);
}

TEST_CASE("config: integers in floating notation, typed errors, the zero that crashed", "[config]") {
  CHECK(parse_config({"--data.synthetic", "--train.max_steps", "1e3"}).train.max_steps == 1000);
  CHECK(parse_config({"--data.synthetic", "--train.max_steps", "2.5e3"}).train.max_steps == 2500);
  auto message = [](std::vector<std::string> args) {
    args.insert(args.begin(), "--data.synthetic");
    try {
      parse_config(args);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK(message({"--train.max_steps", "1.5"}) == "command line: train.max_steps = 1.5: must be an integer");
  CHECK(message({"--optim.lr", "fast"}) == "command line: optim.lr = fast: must be a number");
  CHECK(message({"--run.seed", "-1"}) == "command line: run.seed = -1: must be an integer");
  CHECK(message({"--train.log_every_steps", "0"}) == "command line: train.log_every_steps = 0: must be in [1, 1e+12]");
  CHECK(message({"--train.epochs", "5000000"}) == "command line: train.epochs = 5000000: must be in [0, 1e+06]");
  // Shortest round-trip numbers in the effective config.
  const std::string ini = to_ini(parse_config({"--data.synthetic", "--optim.lr", "0.05"}));
  CHECK(ini.find("lr = 0.05\n") != std::string::npos);
  CHECK(ini.find("max_data_share = 0.3\n") != std::string::npos);
}

TEST_CASE("config: config_differences names each changed key with both values", "[config]") {
  const Config a = parse_config({"--data.synthetic", "--optim.lr", "0.1"});
  const Config b = parse_config({"--data.synthetic", "--optim.lr", "0.2", "--train.epochs", "3"});
  const auto d = config_differences(a, b);
  REQUIRE(d.size() == 2);
  CHECK((d[0].key == "train.epochs" && d[0].from == "1" && d[0].to == "3"));
  CHECK((d[1].key == "optim.lr" && d[1].from == "0.1" && d[1].to == "0.2"));
  CHECK(config_differences(a, a).empty());
}
