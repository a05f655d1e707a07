#pragma once
// A fresh, empty temporary directory per test and process: TMPDIR/<prefix>_<name>_<pid>.
#include <unistd.h>

#include <filesystem>
#include <string>

namespace ht::test {

inline std::filesystem::path fresh_temp_dir(const std::string& prefix, const std::string& name) {
  std::filesystem::path p = std::filesystem::temp_directory_path() / (prefix + "_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p;
}

}  // namespace ht::test
