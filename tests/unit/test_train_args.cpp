// parse_checkpoint_args (src/cli/train_args.hpp): --init-from / --reset-head after parse_config.
#include <catch2/catch.hpp>

#include "base/error.hpp"
#include "src/cli/train_args.hpp"
#include "src/train/config.hpp"

using namespace ht;

namespace {
std::string usage_message(const std::vector<std::string>& extra) {
  try {
    parse_checkpoint_args(extra);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no error)";
}
}  // namespace

TEST_CASE("checkpoint args: --init-from / --reset-head", "[checkpoint][args]") {
  auto a = parse_checkpoint_args({"--init-from", "/x/y.h5", "--reset-head"});
  REQUIRE(a.init_from == "/x/y.h5");
  REQUIRE(a.reset_head);
  REQUIRE(parse_checkpoint_args({"--init-from=/z.h5"}).init_from == "/z.h5");
  REQUIRE(parse_checkpoint_args({"--init-from=--odd.h5"}).init_from == "--odd.h5");
  REQUIRE(parse_checkpoint_args({"--init-from", "a.h5", "--init-from", "b.h5"}).init_from == "b.h5");
  REQUIRE(parse_checkpoint_args({"--reset-head", "--init-from", "a.h5", "--reset-head"}).reset_head);
  REQUIRE_FALSE(parse_checkpoint_args({}).reset_head);
  REQUIRE(parse_checkpoint_args({}).init_from.empty());
}

TEST_CASE("checkpoint args: errors say what is wrong", "[checkpoint][args]") {
  const std::string hint = " (config keys are --section.key; others: --init-from CHECKPOINT, --reset-head)";
  CHECK(usage_message({"--reset-head"}) == "hpctrain train: --reset-head needs --init-from CHECKPOINT");
  CHECK(usage_message({"--init-from"}) == "hpctrain train: --init-from needs a checkpoint path");
  CHECK(usage_message({"--init-from", "--reset-head"}) == "hpctrain train: --init-from needs a checkpoint path");
  CHECK(usage_message({"--init-from", "--bogus"}) == "hpctrain train: --init-from needs a checkpoint path");
  CHECK(usage_message({"--bogus"}) == "hpctrain train: unknown argument '--bogus'" + hint);
  CHECK(usage_message({"--init", "x.h5"}) == "hpctrain train: unknown argument '--init'" + hint);  // no abbreviations
  CHECK(usage_message({"--init-from", "x.h5", "stray"}) == "hpctrain train: unknown argument 'stray'" + hint);
  CHECK(usage_message({"-x"}) == "hpctrain train: unknown argument '-x'" + hint);
  CHECK(usage_message({"--reset-head=yes", "--init-from", "x"}) ==
        "hpctrain train: unknown argument '--reset-head=yes'" + hint);
}

TEST_CASE("checkpoint args: what parse_config leaves over", "[checkpoint][args]") {
  std::vector<std::string> extra;
  Config c = parse_config({"--data.synthetic", "--init-from", "x.h5", "--train.epochs", "2", "--reset-head"}, &extra);
  CHECK(c.train.epochs == 2);
  auto a = parse_checkpoint_args(extra);
  CHECK(a.init_from == "x.h5");
  CHECK(a.reset_head);
}
