// nccl_ras (nccl_ras.hpp): the RAS status query over a local TCP socket, bounded by a deadline.
#include "mpi/nccl_ras.hpp"

#include "mpi/flight_recorder.hpp"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <vector>

namespace ht {
namespace {

using Clock = std::chrono::steady_clock;

/// Milliseconds left until `end` (0 when past).
int ms_left(Clock::time_point end) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
  return ms > 0 ? static_cast<int>(ms) : 0;
}

/// A socket connected to host:port before `end`, or -1 with `why` set.
int connect_before(const RasAddress& a, Clock::time_point end, std::string& why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(a.host.c_str(), a.port.c_str(), &hints, &res); rc != 0) {
    why = "cannot resolve " + a.host + ":" + a.port + ": " + ::gai_strerror(rc);
    return -1;
  }
  int fd = -1;
  for (addrinfo* ai = res; ai && fd < 0; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
      why = std::string("nothing answers on ") + a.host + ":" + a.port + " (" + std::strerror(errno) + ")";
      ::close(fd), fd = -1;
      continue;
    }
    pollfd p{fd, POLLOUT, 0};
    int err = 0;
    socklen_t len = sizeof err;
    if (::poll(&p, 1, ms_left(end)) != 1 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
      why = std::string("nothing answers on ") + a.host + ":" + a.port + " (" +
            (err ? std::strerror(err) : "connection timed out") + ")";
      ::close(fd), fd = -1;
    }
  }
  ::freeaddrinfo(res);
  return fd;
}

bool send_all(int fd, const std::string& s, Clock::time_point end) {
  size_t done = 0;
  while (done < s.size()) {
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, ms_left(end)) != 1) return false;
    const ssize_t n = ::send(fd, s.data() + done, s.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno != EINTR && errno != EAGAIN) return false;
    if (n > 0) done += static_cast<size_t>(n);
  }
  return true;
}

/// Reads into `buf` until a newline (line = true) or the peer closes; false on the deadline or an
/// error. `closed` tells whether the peer closed. A report is capped at 4 MiB.
bool read_until(int fd, std::string& buf, bool line, Clock::time_point end, bool& closed) {
  closed = false;
  char chunk[4096];
  while (!(line && buf.find('\n') != std::string::npos)) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, ms_left(end)) != 1) return false;
    const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n == 0) {
      closed = true;
      return !line;
    }
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return false;
    }
    buf.append(chunk, static_cast<size_t>(n));
    if (buf.size() > (4u << 20)) return false;
  }
  return true;
}

}  // namespace

RasAddress nccl_ras_address() {
  RasAddress a;
  const char* env = std::getenv("NCCL_RAS_ADDR");
  if (!env || !*env) return a;
  std::string s = env;
  if (s.front() == '[') {  // [IPv6]:PORT
    const auto close = s.find(']');
    a.host = s.substr(1, close == std::string::npos ? std::string::npos : close - 1);
    if (close != std::string::npos && close + 1 < s.size() && s[close + 1] == ':') a.port = s.substr(close + 2);
    return a;
  }
  const auto colon = s.rfind(':');
  if (colon == std::string::npos || s.find(':') != colon) {
    a.host = s;
  } else {
    a.host = s.substr(0, colon);
    a.port = s.substr(colon + 1);
  }
  return a;
}

RasStatus nccl_ras_query(const RasAddress& addr, int ras_timeout_s, double deadline_s) noexcept {
  RasStatus st;
  try {
    const auto end = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(deadline_s * 1000));
    int fd = connect_before(addr, end, st.error);
    if (fd < 0) return st;
    struct Close {
      int fd;
      ~Close() { ::close(fd); }
    } close_fd{fd};
    std::string in;
    bool closed = false;
    if (!send_all(fd, "CLIENT PROTOCOL 2\n", end) || !read_until(fd, in, true, end, closed)) {
      st.error = "no answer to the RAS handshake from " + addr.host + ":" + addr.port;
      return st;
    }
    if (in.rfind("SERVER PROTOCOL ", 0) != 0) {
      st.error = "not an NCCL RAS service on " + addr.host + ":" + addr.port + " (it answered '" +
                 in.substr(0, std::min<size_t>(in.find('\n'), 60)) + "')";
      return st;
    }
    st.reached = true;
    in.clear();
    if (!send_all(fd, "TIMEOUT " + std::to_string(ras_timeout_s < 0 ? 0 : ras_timeout_s) + "\n", end) ||
        !read_until(fd, in, true, end, closed) || in.rfind("OK", 0) != 0) {
      st.error = "the RAS service refused TIMEOUT: '" + in.substr(0, std::min<size_t>(in.find('\n'), 60)) + "'";
      return st;
    }
    st.report.clear();
    if (!send_all(fd, "STATUS\n", end)) {
      st.error = "the RAS service stopped answering";
      return st;
    }
    if (!read_until(fd, st.report, false, end, closed) || !closed)
      st.error = "the RAS report was not complete within " + std::to_string(deadline_s).substr(0, 4) + " s";
  } catch (...) {
    st.error = "out of memory reading the RAS report";
  }
  return st;
}

std::string nccl_ras_problems(const std::string& report, int max_lines) {
  static const char* kMarks[] = {"Warning", "missing", "Missing", "outlier", "INCOMPLETE", "ERROR", "MISMATCH",
                                 "unresponsive", "Process "};
  std::istringstream in(report);
  std::string line, out;
  int n = 0;
  while (std::getline(in, line) && n < max_lines) {
    bool hit = false;
    for (const char* m : kMarks) hit |= line.find(m) != std::string::npos;
    if (!hit) continue;
    const auto b = line.find_first_not_of(" \t"), e = line.find_last_not_of(" \t\r");
    if (b == std::string::npos) continue;
    if (!out.empty()) out += "; ";
    out.append(line, b, e - b + 1);
    ++n;
  }
  return out.empty() ? "no problem reported" : out;
}

std::string nccl_ras_timeout_note(int rank, int ras_timeout_s, double deadline_s) noexcept {
  try {
    const RasStatus st = nccl_ras_query(nccl_ras_address(), ras_timeout_s, deadline_s);
    if (!st.reached) return "; NCCL RAS: not reached: " + st.error;
    std::string note = "; NCCL RAS: " + nccl_ras_problems(st.report);
    if (!st.error.empty()) note += " (" + st.error + ")";
    char name[40];
    std::snprintf(name, sizeof name, "nccl-ras-rank-%05d.txt", rank);
    if (const std::string path = st.report.empty() ? "" : flight_recorder_write(name, st.report); !path.empty())
      note += " (report: " + path + ")";
    return note;
  } catch (...) {
    return "";
  }
}

}  // namespace ht
