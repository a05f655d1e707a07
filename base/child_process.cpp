// run_self and the child-side limits (base/child_process.hpp).
#include "base/child_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>

#include "base/error.hpp"

extern char** environ;

namespace ht {

namespace {

using Clock = std::chrono::steady_clock;

// Closes a descriptor at scope end.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Reaps `pid`, retrying on EINTR; the raw wait status.
int reap(pid_t pid) {
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return st;
}

}  // namespace

std::string signal_name(int signo) {
  const char* a = sigabbrev_np(signo);
  return a ? std::string("SIG") + a : "signal " + std::to_string(signo);
}

ChildResult run_self(const std::vector<std::string>& args, const ChildOptions& opt) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) throw RuntimeError(std::string("cannot create a pipe: ") + strerror(errno));
  Fd rd{p[0]}, wr{p[1]};
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&at);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, wr.fd, 2);  // dup2 clears FD_CLOEXEC on the copy
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&at, &none);
  posix_spawnattr_setsigdefault(&at, &all);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<std::string> argv_s{"hpctrain"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const auto t0 = Clock::now();
  int rc = ::posix_spawn(&pid, "/proc/self/exe", &fa, &at, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  if (rc != 0) throw RuntimeError(std::string("cannot start a child process (/proc/self/exe): ") + strerror(rc));
  ::close(wr.fd);
  wr.fd = -1;

  ChildResult r;
  const auto deadline = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(opt.timeout_s));
  bool timed_out = false;
  // The pipe closes when the child exits (it starts no process of its own), so polling it alone
  // waits for the end; the deadline bounds the wait.
  for (;;) {
    const auto now = Clock::now();
    if (now >= deadline) {
      timed_out = true;
      break;
    }
    const long long left_ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1;
    pollfd pfd{rd.fd, POLLIN, 0};
    int n = ::poll(&pfd, 1, static_cast<int>(std::min<long long>(left_ms, 1000)));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;
    char buf[4096];
    ssize_t got = ::read(rd.fd, buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;  // end of file: the child has exited (or closed its standard error)
    const size_t room = opt.max_err_bytes > r.err.size() ? opt.max_err_bytes - r.err.size() : 0;
    r.err.append(buf, std::min(room, static_cast<size_t>(got)));
  }
  if (timed_out) {
    ::kill(pid, SIGKILL);
    reap(pid);
    r.end = ChildResult::End::timed_out;
  } else {
    // Standard error closed: the child is exiting; a child that closed it early still gets the limit.
    int st = 0;
    for (;;) {
      pid_t w = ::waitpid(pid, &st, WNOHANG);
      if (w == pid) break;
      if (w < 0 && errno != EINTR) break;
      if (Clock::now() >= deadline) {
        ::kill(pid, SIGKILL);
        reap(pid);
        r.end = ChildResult::End::timed_out;
        break;
      }
      ::usleep(2000);
    }
    if (r.end != ChildResult::End::timed_out) {
      if (WIFSIGNALED(st)) {
        r.end = ChildResult::End::signaled;
        r.code = WTERMSIG(st);
      } else {
        r.end = ChildResult::End::exited;
        r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
      }
    }
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return r;
}

void harden_child_process(size_t max_address_bytes, long parent_pid) {
  rlimit no_core{0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);
#if defined(__SANITIZE_ADDRESS__)
  // AddressSanitizer has reserved terabytes of shadow address space before main(): any cap makes its
  // next mmap fail. Its own allocator limit (allocator_may_return_null, max_allocation_size_mb) stands in.
  max_address_bytes = 0;
#endif
  if (max_address_bytes > 0) {
    rlimit cur{};
    if (::getrlimit(RLIMIT_AS, &cur) == 0 && (cur.rlim_cur == RLIM_INFINITY || cur.rlim_cur > max_address_bytes)) {
      rlimit as{static_cast<rlim_t>(max_address_bytes), cur.rlim_max};
      ::setrlimit(RLIMIT_AS, &as);
    }
  }
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (parent_pid > 0 && ::getppid() != static_cast<pid_t>(parent_pid)) ::_exit(1);  // it died before prctl
}

}  // namespace ht
