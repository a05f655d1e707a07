#pragma once
// Checks on the text of messages (errors, reports) that must name certain things.
#include <catch2/catch.hpp>

#include <initializer_list>
#include <string>

namespace ht::test {

/// Checks that text contains every one of parts; each missing part is its own failure, shown with the
/// whole text.
inline void check_mentions(const std::string& text, std::initializer_list<std::string> parts) {
  INFO("text: " << text);
  for (const auto& p : parts) {
    INFO("expected part: " << p);
    CHECK(text.find(p) != std::string::npos);
  }
}

}  // namespace ht::test
