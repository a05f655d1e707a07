#pragma once
// Enum values and their names in one table, for the enums that are written as text (config keys,
// metrics.jsonl fields).
#include <cstddef>
#include <utility>

namespace ht {

/// The name of `v` in `table` ({value, name} pairs), "?" when it is not there.
template <class E, std::size_t N>
constexpr const char* enum_name(E v, const std::pair<E, const char*> (&table)[N]) {
  for (const auto& [e, name] : table)
    if (e == v) return name;
  return "?";
}

}  // namespace ht
