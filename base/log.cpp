// The one log (base/log.hpp).
#include "base/log.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <mutex>

namespace ht {
namespace {
std::atomic<int> g_rank{0};
std::atomic<int> g_world_size{1};
std::mutex g_host_mu;
std::string g_host;

// One write(2) for the whole line (partial writes continued). For stdout, stdio's buffer (what a
// library printed through it) is flushed first so that its lines stay before this one.
void write_line(int fd, const std::string& line) {
  std::string s = line;
  if (s.empty() || s.back() != '\n') s += '\n';
  if (fd == 1) std::fflush(stdout);
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
}

std::string prefixed(const char* kind, const std::string& line) {
  if (g_world_size.load() <= 1) return std::string("hpctrain: ") + kind + ": " + line;
  return std::string("hpctrain: ") + kind + " (" + log_rank_host() + "): " + line;
}
}  // namespace

void set_log_identity(int rank, int world_size, const std::string& host) {
  std::lock_guard<std::mutex> lock(g_host_mu);
  g_host = host;
  g_rank = rank;
  g_world_size = world_size;
}

std::string log_rank_host() {
  std::lock_guard<std::mutex> lock(g_host_mu);
  return "rank " + std::to_string(g_rank.load()) + (g_host.empty() ? "" : " on " + g_host);
}

void log_info(const std::string& line) {
  if (g_rank.load() == 0) write_line(1, line);
}
void log_info_every_rank(const std::string& line) { write_line(1, line); }
void log_warn(const std::string& line) { write_line(2, prefixed("warning", line)); }
void log_warn_job(const std::string& line) {
  if (g_rank.load() == 0) write_line(2, "hpctrain: warning: " + line);
}
void log_error(const std::string& line) { write_line(2, prefixed("error", line)); }
void log_usage_error(const std::string& line) {
  write_line(2, "hpctrain: error (rank " + std::to_string(g_rank.load()) + "): " + line);
}
void log_fatal(const std::string& line) { write_line(2, prefixed("fatal", line)); }
void log_raw_err(const std::string& line) { write_line(2, line); }
void log_raw_out(const std::string& line) { write_line(1, line); }

std::string strf(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  va_list ap2;
  va_copy(ap2, ap);
  int n = std::vsnprintf(nullptr, 0, fmt, ap);
  va_end(ap);
  std::string s(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(s.data(), s.size() + 1, fmt, ap2);
  va_end(ap2);
  return s;
}

}  // namespace ht
