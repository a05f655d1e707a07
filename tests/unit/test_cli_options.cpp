// CommandLine (src/cli/cli_options.hpp): the one option parser of every subcommand.
#include <catch2/catch.hpp>

#include <sstream>

#include "base/error.hpp"
#include "src/cli/cli_options.hpp"

using namespace ht;

namespace {

struct IoLike {
  std::string dir = "data/fashion-mnist", out;
  int64_t batch = 256;
  int reps = 3;
  double step_ms = 250;
  bool verbose = false;
  std::vector<std::string> paths;
  CommandLine cl{"hpctrain test", "usage: hpctrain test [--data DIR] [--batch B] [PATH]"};
  IoLike() {
    cl.option("data", &dir, "DIR", "prepared dataset")
        .option("out", &out, "FILE", "JSON results")
        .option("batch", &batch, "B", "global batch")
        .option("reps", &reps, "R", "repetitions")
        .option("step-ms", &step_ms, "MS", "simulated step time")
        .flag("verbose", &verbose, "say more");
  }
};

std::string usage_error(CommandLine& cl, const Args& args) {
  try {
    cl.parse(args);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("cli options: values, defaults, last occurrence wins, --name=value", "[cli]") {
  IoLike t;
  REQUIRE(t.cl.parse({"--batch", "64", "--data=/d", "--step-ms", "12.5", "--verbose", "--batch", "128"}));
  CHECK(t.batch == 128);
  CHECK(t.dir == "/d");
  CHECK(t.step_ms == 12.5);
  CHECK(t.verbose);
  CHECK(t.reps == 3);  // default kept
  CHECK(t.out.empty());
  CHECK(t.cl.given("batch"));
  CHECK_FALSE(t.cl.given("reps"));
}

TEST_CASE("cli options: negative numbers are values", "[cli]") {
  IoLike t;
  REQUIRE(t.cl.parse({"--reps", "-1", "--step-ms", "-0.5"}));
  CHECK(t.reps == -1);
  CHECK(t.step_ms == -0.5);
}

TEST_CASE("cli options: an unknown option names itself and the closest valid one", "[cli]") {
  IoLike t;
  CHECK(usage_error(t.cl, {"--bacth", "3"}) ==
        "hpctrain test: unknown option '--bacth' (did you mean '--batch'?); see 'hpctrain test --help'");
  IoLike u;
  CHECK(usage_error(u.cl, {"--dat=/x"}) ==
        "hpctrain test: unknown option '--dat' (did you mean '--data'?); see 'hpctrain test --help'");
  IoLike v;  // no abbreviations: a prefix of a valid option is unknown too
  CHECK(usage_error(v.cl, {"--rep", "2"}).find("unknown option '--rep' (did you mean '--reps'?)") != std::string::npos);
}

TEST_CASE("cli options: a missing value names the option", "[cli]") {
  IoLike t;
  CHECK(usage_error(t.cl, {"--batch"}) == "hpctrain test: --batch needs a value");
  IoLike u;
  CHECK(usage_error(u.cl, {"--data", "--batch", "2"}) == "hpctrain test: --data needs a value");
}

TEST_CASE("cli options: a bad number names the option, the value and the type", "[cli]") {
  IoLike t;
  CHECK(usage_error(t.cl, {"--batch", "x"}) == "hpctrain test: --batch 'x' is not an integer");
  IoLike u;
  CHECK(usage_error(u.cl, {"--reps", "2.5"}) == "hpctrain test: --reps '2.5' is not an integer");
  IoLike v;
  CHECK(usage_error(v.cl, {"--step-ms", "fast"}) == "hpctrain test: --step-ms 'fast' is not a number");
}

TEST_CASE("cli options: positional arguments", "[cli]") {
  IoLike t;
  t.cl.positional("PATH", &t.paths, 1);
  REQUIRE(t.cl.parse({"a.h5", "--batch", "8"}));
  CHECK(t.paths == std::vector<std::string>{"a.h5"});
  CHECK(t.batch == 8);

  IoLike u;
  u.cl.positional("PATH", &u.paths, 1);
  CHECK(usage_error(u.cl, {"a", "b"}) == "hpctrain test: one PATH only ('b')");
  CHECK(u.paths.empty());  // nothing stored from a failed parse

  IoLike v;  // none declared
  CHECK(usage_error(v.cl, {"stray"}) == "hpctrain test: unexpected argument 'stray'");
}

TEST_CASE("cli options: pass_through keeps unknown tokens in order", "[cli]") {
  IoLike t;
  std::vector<std::string> rest;
  t.cl.pass_through(&rest);
  REQUIRE(t.cl.parse({"--train.lr", "0.5", "--batch", "4", "--data.dir=/x", "--optim.momentum", "-0.1"}));
  CHECK(t.batch == 4);
  CHECK(rest == std::vector<std::string>{"--train.lr", "0.5", "--data.dir=/x", "--optim.momentum", "-0.1"});
}

TEST_CASE("cli options: --help prints usage and options with defaults, and parse returns false", "[cli]") {
  IoLike t;
  std::ostringstream os;
  CHECK_FALSE(t.cl.parse({"--bogus", "--help"}, &os));  // help wins over other errors
  const std::string h = os.str();
  CHECK(h.rfind("usage: hpctrain test [--data DIR] [--batch B] [PATH]\n", 0) == 0);
  CHECK(h.find("  -h, --help    this help\n") != std::string::npos);
  CHECK(h.find("  --data DIR    prepared dataset (default data/fashion-mnist)\n") != std::string::npos);
  CHECK(h.find("  --out FILE    JSON results\n") != std::string::npos);  // empty default not shown
  CHECK(h.find("  --step-ms MS  simulated step time (default 250)\n") != std::string::npos);
  CHECK(h.find("  --verbose     say more\n") != std::string::npos);
  IoLike u;
  std::ostringstream os2;
  CHECK_FALSE(u.cl.parse({"-h"}, &os2));
  CHECK(os2.str() == h);
}

TEST_CASE("cli options: closest_match and edit_distance", "[cli]") {
  CHECK(edit_distance("kitten", "sitting") == 3);
  CHECK(edit_distance("", "abc") == 3);
  CHECK(closest_match("stpes", {"warmup", "steps", "out"}) == "steps");
  CHECK(closest_match("x", {}).empty());
}
