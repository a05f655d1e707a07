#pragma once
// A fresh, empty temporary directory per test and process: TMPDIR/<prefix>_<name>_<pid>; a file's
// bytes read and written whole.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace ht::test {

inline std::filesystem::path fresh_temp_dir(const std::string& prefix, const std::string& name) {
  std::filesystem::path p = std::filesystem::temp_directory_path() / (prefix + "_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p;
}

/// The bytes of file `p` ("" when it cannot be read).
inline std::string file_bytes(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

/// Replaces file `p` with `bytes`.
inline void write_file_bytes(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << bytes;
}

}  // namespace ht::test
