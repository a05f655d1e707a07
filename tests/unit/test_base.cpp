// The base layer's small helpers: FNV-1a against published test vectors, test-fault parsing.
#include <catch2/catch.hpp>

#include "base/error.hpp"
#include "base/hash.hpp"
#include "base/test_faults.hpp"

using namespace ht;

TEST_CASE("FNV-1a 64 matches the reference vectors", "[base]") {
  // Test vectors of the FNV reference (Fowler/Noll/Vo): "" -> offset basis, "a", "foobar".
  CHECK(fnv1a("") == 0xcbf29ce484222325ull);
  CHECK(fnv1a("a") == 0xaf63dc4c8601ec8cull);
  CHECK(fnv1a("foobar") == 0x85944171f73967e8ull);
  CHECK(hex64(0xaf63dc4c8601ec8cull) == "af63dc4c8601ec8c");
  Fnv1a split;
  split.update("foo");
  split.update("bar");
  CHECK(split.value() == fnv1a("foobar"));
  Fnv1a a, b;
  a.update_int(0x0102030405060708);
  const unsigned char le[8] = {8, 7, 6, 5, 4, 3, 2, 1};
  b.update(le, 8);
  CHECK(a.value() == b.value());
}

TEST_CASE("HT_TEST_FAULTS parsing", "[base]") {
  TestFaults f = TestFaults::parse("fail_at_step=3; fail_rank=1;doctor.hosts=a,b|c");
  CHECK(f.active());
  CHECK(f.integer("fail_at_step", -1) == 3);
  CHECK(f.integer("fail_rank", -1) == 1);
  CHECK(f.integer("nan_at_step", -7) == -7);
  CHECK(f.text_for_rank("doctor.hosts", 0) == std::optional<std::string>("a,b"));
  CHECK(f.text_for_rank("doctor.hosts", 1) == std::optional<std::string>("c"));
  CHECK_FALSE(f.text_for_rank("doctor.hosts", 2).has_value());
  CHECK_FALSE(TestFaults::parse("").active());
  CHECK_THROWS_AS(TestFaults::parse("fail_at_stpe=3"), UsageError);
  CHECK_THROWS_WITH(TestFaults::parse("fail_at_stpe=3"), Catch::Contains("fail_at_stpe"));
  CHECK_THROWS_AS(TestFaults::parse("fail_at_step"), UsageError);
  CHECK_THROWS_AS(TestFaults::parse("fail_at_step=x").integer("fail_at_step", 0), UsageError);
  CHECK(TestFaults::parse("ckpt_write_delay_ms=2.5").number("ckpt_write_delay_ms", 0) == 2.5);
}
