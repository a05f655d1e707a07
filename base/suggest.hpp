#pragma once
// "Did you mean ...?" suggestions: the edit distance between two spellings and the closest of a
// list of candidates, for unknown command-line options and unknown config keys.
#include <cstddef>
#include <string>
#include <vector>

namespace ht {

/// Levenshtein distance between a and b (insertions, deletions, substitutions, each 1).
size_t edit_distance(const std::string& a, const std::string& b);

/// The candidate closest to `word` by edit_distance (the first of equals); "" when there is none.
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace ht
