#pragma once
// metrics.jsonl writer (docs/metrics.md): one JSON object per line with an `event` field,
// appended (a resumed run continues the same file) and flushed line by line so a killed job keeps
// everything up to its last step. Only rank 0 writes.
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace ht {

class MetricsWriter {
 public:
  MetricsWriter() = default;
  /// Opens `path` for appending; throws RuntimeError naming the path on failure.
  explicit MetricsWriter(const std::string& path);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  bool is_open() const { return f_ != nullptr; }
  /// Adds "time" (Unix seconds) and writes the object as one line.
  void write(nlohmann::json j);

 private:
  std::FILE* f_ = nullptr;
  std::string path_;
};

}  // namespace ht
