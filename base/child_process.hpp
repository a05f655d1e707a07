#pragma once
// Running a copy of this executable as a child process with a time limit: the file-vetting child of
// `hpctrain verify` (src/train/file_vetting.hpp). posix_spawn, not fork: the parent may be an MPI rank
// with many threads, and posix_spawn (vfork-like in glibc) runs no pthread_atfork handlers and copies
// no address space, which is what Open MPI asks of processes that start children after MPI_Init.
#include <string>
#include <vector>

namespace ht {

/// How a child ended.
struct ChildResult {
  enum class End { exited, signaled, timed_out } end = End::exited;
  int code = 0;        ///< exit status (exited) or signal number (signaled)
  double seconds = 0;  ///< wall time from spawn to reaping
  std::string err;     ///< the first bytes of its standard error (at most max_err_bytes)
};

/// Options of run_self.
struct ChildOptions {
  double timeout_s = 60;                ///< SIGKILL after this many seconds (then End::timed_out)
  size_t max_err_bytes = 8192;          ///< standard error kept (the rest is read and dropped)
};

/// Spawns /proc/self/exe with `args` (argv[1..]), standard input and output on /dev/null, standard
/// error on a pipe, an empty signal mask and default dispositions (the parent blocks stop signals,
/// src/train/signals.hpp), waits for it at most opt.timeout_s seconds, kills it with SIGKILL when it is
/// still running then, and always reaps it (no zombie, no leftover process). Throws RuntimeError when
/// the child cannot be started.
ChildResult run_self(const std::vector<std::string>& args, const ChildOptions& opt);

/// In the child, first thing: no core file (RLIMIT_CORE 0: a crash there is expected and reported by
/// the parent), an address-space cap of `max_address_bytes` (0: none; none in an AddressSanitizer build) so a corrupt size cannot make
/// the node swap, and SIGKILL when the parent dies (PR_SET_PDEATHSIG) so no child outlives its rank;
/// exits at once when the parent is no longer `parent_pid` (it died before that; 0: not checked).
void harden_child_process(size_t max_address_bytes, long parent_pid);

/// "SIGSEGV" for 11, "signal 77" for numbers without a name.
std::string signal_name(int signo);

}  // namespace ht
