#pragma once
// Test-only fault injection: the one mechanism through which tests make hpctrain fail on purpose
// (a rank that throws, NaN input, slow checkpoint writes, a self-sent signal, the doctor's faked
// environment). It is read from the environment variable HT_TEST_FAULTS, never from the config:
// it does not appear in --help, in RUN_DIR/config.ini or in the config hash. See docs/testing.md.
//
//   HT_TEST_FAULTS="fail_at_step=3;fail_rank=1"      # name=value pairs separated by ';'
//   HT_TEST_FAULTS="doctor.hosts=node-a|node-b"      # '|' separates per-rank values (rank r takes entry r)
//
// Values may contain commas and spaces.
// Every name must be one of kTestFaultNames (a typo is a UsageError naming it, so a test cannot
// silently inject nothing). When the variable is set, rank 0 of `hpctrain train` and
// `hpctrain doctor` print one warning line saying that faults are being injected.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/tensor.hpp"

namespace ht {

/// The names HT_TEST_FAULTS accepts, each with a one-line meaning (docs/testing.md lists them).
struct TestFaultName {
  const char* name;
  const char* meaning;
};
const std::vector<TestFaultName>& test_fault_names();

/// The parsed HT_TEST_FAULTS. Values are strings; the typed getters convert and throw UsageError
/// naming HT_TEST_FAULTS, the name and the value when a value does not parse.
class TestFaults {
 public:
  /// Parses `spec` ("a=1;b=x"); throws UsageError for an unknown name or a pair without '='.
  static TestFaults parse(std::string_view spec);
  /// The process-wide instance, parsed from the environment on first use (empty when unset).
  static const TestFaults& get();

  bool active() const { return !values_.empty(); }
  bool has(std::string_view name) const;
  std::optional<std::string> text(std::string_view name) const;
  int64_t integer(std::string_view name, int64_t fallback) const;
  double number(std::string_view name, double fallback) const;
  /// This rank's value of a per-rank list ("a|b|c": rank r takes entry r; a value without '|' applies
  /// to every rank); nullopt when the name is absent or the list has no entry for `rank`.
  std::optional<std::string> text_for_rank(std::string_view name, int rank) const;
  /// The spec as given (for the warning line).
  const std::string& spec() const { return spec_; }

 private:
  std::map<std::string, std::string, std::less<>> values_;
  std::string spec_;
};

/// The faults a training step meets, read once for one rank: fail_at_step / fail_rank (throw),
/// nan_at_step / nan_rank (a NaN input), slow_data_ms (per-rank: a slow data phase). The trainer hands
/// every batch to on_batch before the step uses it, so the step itself holds no test code.
class StepFaults {
 public:
  /// This rank's faults from HT_TEST_FAULTS; throws UsageError for a value that does not parse.
  static StepFaults for_rank(int rank);
  /// At `step` (the number of steps done so far): sleeps slow_data_ms; throws RuntimeError at
  /// fail_at_step; writes NaN into images' first element at nan_at_step, once (a skipped step does not
  /// advance the step counter). `images` may be on either device.
  void on_batch(int64_t step, Tensor& images);

 private:
  int64_t fail_at_step_ = -1;
  int64_t nan_at_step_ = -1;
  bool nan_done_ = false;
  double slow_data_ms_ = 0;
};

}  // namespace ht
