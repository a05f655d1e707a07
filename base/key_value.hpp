#pragma once
// Small text records of "key=value" lines: the launch fingerprints ranks exchange
// (src/train/launch_check.cpp) and the run directory's lock file (src/train/run_lock.cpp).
#include <map>
#include <string>

namespace ht {

/// `m` as "key=value\n" lines in key order; a newline or NUL inside a value becomes a space.
std::string format_key_value_lines(const std::map<std::string, std::string>& m);

/// The "key=value" lines of `text` (split at the first '='; lines without '=' are skipped; a later
/// key replaces an earlier one).
std::map<std::string, std::string> parse_key_value_lines(const std::string& text);

}  // namespace ht
