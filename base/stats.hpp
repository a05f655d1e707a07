#pragma once
// Small summaries shared by the judges of a run (the watchdog, doctor --qualify, benchmarks).
#include <algorithm>
#include <string>
#include <vector>

namespace ht {

/// The median of `v` (the mean of the middle two for an even count); 0 for an empty vector.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// "rank 3", "ranks 0-3", "ranks 0, 2-3, 5": the ranks sorted, consecutive runs compressed.
inline std::string ranks_text(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (i) out += ", ";
    out += std::to_string(ranks[i]);
    if (j > i) out.append("-").append(std::to_string(ranks[j]));
    i = j + 1;
  }
  return out;
}

}  // namespace ht
