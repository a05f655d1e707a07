#include "io/metrics.hpp"

#include <cerrno>
#include <chrono>
#include <cstring>

#include "base/error.hpp"

namespace ht {

MetricsWriter::MetricsWriter(const std::string& path) : path_(path) {
  f_ = std::fopen(path.c_str(), "a");
  if (!f_) throw RuntimeError("cannot open metrics file " + path + ": " + std::strerror(errno));
}

MetricsWriter::~MetricsWriter() {
  if (f_) std::fclose(f_);
}

void MetricsWriter::write(nlohmann::json j) {
  if (!f_) return;
  j["time"] = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::string line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  line += '\n';
  if (std::fwrite(line.data(), 1, line.size(), f_) != line.size() || std::fflush(f_) != 0)
    throw RuntimeError("cannot write metrics file " + path_ + ": " + std::strerror(errno));
}

}  // namespace ht
