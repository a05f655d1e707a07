#include <catch2/catch.hpp>

#include "src/train/config.hpp"
#include "src/base/error.hpp"

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
