// Out-of-line parts of the small base helpers: hash.hpp, bytes.hpp, check.hpp.
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <sstream>

#include "base/bytes.hpp"
#include "base/check.hpp"
#include "base/error.hpp"
#include "base/hash.hpp"
#include "base/key_value.hpp"

namespace ht {

std::string hex64(uint64_t h) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string format_bytes(uint64_t bytes) {
  char buf[64];
  const double b = static_cast<double>(bytes);
  if (bytes >= (uint64_t{1} << 30)) std::snprintf(buf, sizeof(buf), "%.2f GiB", b / (1u << 30));
  else if (bytes >= (uint64_t{1} << 20)) std::snprintf(buf, sizeof(buf), "%.1f MiB", b / (1u << 20));
  else if (bytes >= (uint64_t{1} << 10)) std::snprintf(buf, sizeof(buf), "%.1f KiB", b / (1u << 10));
  else std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(bytes));
  return buf;
}

std::string format_gib(double bytes) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.1f GiB", bytes / double(uint64_t{1} << 30));
  return buf;
}

namespace {
std::atomic<int> g_message_rank{-1};
}

void set_message_rank(int rank) { g_message_rank.store(rank); }

std::string rank_host_tag() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  std::ostringstream os;
  int rank = g_message_rank.load();
  if (rank >= 0) os << "rank " << rank << " on " << host;
  else os << "rank ? on " << host;
  return os.str();
}

void check_failed(const char* lib, const char* file, int line, const char* call, const std::string& detail) {
  std::ostringstream os;
  os << lib << " error at " << file << ":" << line << " (" << rank_host_tag() << "): " << call
     << " failed: " << detail;
  throw RuntimeError(os.str());
}

int exit_code_of(const std::exception_ptr& e, std::string& message) {
  try {
    std::rethrow_exception(e);
  } catch (const UsageError& u) {
    message = u.what();
    return kExitUsage;
  } catch (const std::exception& x) {
    message = x.what();
  } catch (...) {
    message = "unknown exception";
  }
  return kExitRuntime;
}

std::string format_key_value_lines(const std::map<std::string, std::string>& m) {
  std::string s;
  for (const auto& [k, v] : m) {
    std::string one = v;
    for (char& c : one)
      if (c == '\n' || c == '\0') c = ' ';
    s += k + "=" + one + "\n";
  }
  return s;
}

std::map<std::string, std::string> parse_key_value_lines(const std::string& text) {
  std::map<std::string, std::string> m;
  std::istringstream is(text);
  std::string line;
  while (std::getline(is, line)) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) m[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return m;
}

}  // namespace ht
