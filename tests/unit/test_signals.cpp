// Preemption signals (src/train/signals.hpp): the flag-setting handler, replacing the set without a
// moment of the default action, the end of a run, and keeping signals off computing threads.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <thread>
#include <vector>

#include "base/error.hpp"
#include "src/train/signals.hpp"

using namespace ht;

TEST_CASE("stop signals only set a flag", "[checkpoint][signals]") {
  REQUIRE(parse_signal_list("TERM,USR1") == std::vector<int>{SIGTERM, SIGUSR1});
  REQUIRE(parse_signal_list(" sigusr2 , 15,TERM") == std::vector<int>{SIGUSR2, SIGTERM});
  REQUIRE_THROWS_AS(parse_signal_list("TERM,KILL"), UsageError);
  REQUIRE_THROWS_AS(parse_signal_list("BOGUS"), UsageError);
  clear_stop_request();
  install_stop_signals("USR1,USR2");
  REQUIRE_FALSE(stop_requested());
  raise(SIGUSR2);
  REQUIRE(stop_requested());
  REQUIRE(stop_signal() == SIGUSR2);
  raise(SIGUSR1);  // a second signal: still alive, first one kept
  REQUIRE(stop_signal() == SIGUSR2);
  REQUIRE(agree_step_flags(kFlagStop | kFlagCheckpoint) == (kFlagStop | kFlagCheckpoint));
  restore_stop_signals();
  clear_stop_request();
  REQUIRE_FALSE(stop_requested());
}

// After the run (retire_stop_signals) a late forwarded USR1 must not kill the rank that already
// agreed to stop (the podman-per-rank Slurm preemption flake: exit 138 after the checkpoint), while
// TERM gets its previous disposition back.
TEST_CASE("after the run a late checkpoint signal is harmless, TERM is restored", "[checkpoint][signals]") {
  struct sigaction before_term {};
  sigaction(SIGTERM, nullptr, &before_term);
  clear_stop_request();
  install_stop_signals("TERM,USR1");
  retire_stop_signals();
  struct sigaction now {};
  sigaction(SIGTERM, nullptr, &now);
  REQUIRE(now.sa_handler == before_term.sa_handler);
  sigaction(SIGUSR1, nullptr, &now);
  REQUIRE(now.sa_handler != SIG_DFL);
  REQUIRE(now.sa_handler != SIG_IGN);
  raise(SIGUSR1);  // under SIG_DFL this would end the test binary
  REQUIRE(stop_signal() == SIGUSR1);
  restore_stop_signals();
  sigaction(SIGUSR1, nullptr, &now);
  REQUIRE(now.sa_handler == SIG_DFL);
  clear_stop_request();
}

// In a forked child (the isolation is process-wide and must not leak into the other tests): after
// isolate_signals_to_receiver_thread() this (computing) thread blocks the stop signals, a
// process-directed USR1 is still handled (on the receiver thread), and a thread started afterwards
// inherits the block. Guards the fix for oneDNN's JIT gemm, which corrupts the heap when a signal
// frame is pushed while it runs (src/train/signals.hpp).
TEST_CASE("stop signals are kept off computing threads", "[checkpoint][signals]") {
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int code = 0;
    isolate_signals_to_receiver_thread();
    install_stop_signals("USR1");
    sigset_t cur;
    pthread_sigmask(SIG_BLOCK, nullptr, &cur);
    if (!sigismember(&cur, SIGUSR1) || !sigismember(&cur, SIGTERM)) code |= 1;  // main thread blocks them
    bool child_blocks = false;
    std::thread([&] {
      sigset_t m;
      pthread_sigmask(SIG_BLOCK, nullptr, &m);
      child_blocks = sigismember(&m, SIGUSR1) == 1;
    }).join();
    if (!child_blocks) code |= 2;  // threads made later inherit the block
    kill(getpid(), SIGUSR1);
    for (int i = 0; i < 200 && !stop_requested(); ++i) usleep(5000);
    if (stop_signal() != SIGUSR1) code |= 4;  // still handled, on the receiver thread
    sigset_t pending;
    sigpending(&pending);
    if (sigismember(&pending, SIGUSR1)) code |= 8;  // not left pending on this thread
    _exit(code);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);  // bits: 1 main not blocked, 2 new thread not blocked, 4 not handled, 8 pending
}

// hpctrain train installs the default set before MPI_Init and the configured one once the config
// is read: a signal in both keeps the handler (the saved disposition is still the one from before
// the first install), one only in the old set gets its old disposition back.
TEST_CASE("replacing the stop signals keeps the handler of the signals in both sets", "[checkpoint][signals]") {
  struct sigaction orig_usr1 {}, orig_term {}, now {};
  sigaction(SIGUSR1, nullptr, &orig_usr1);
  sigaction(SIGTERM, nullptr, &orig_term);
  clear_stop_request();
  install_stop_signals("TERM,USR1");
  sigaction(SIGUSR1, nullptr, &now);
  const auto handler = now.sa_handler;
  REQUIRE(handler != orig_usr1.sa_handler);
  install_stop_signals("USR1,USR2");
  sigaction(SIGUSR1, nullptr, &now);
  REQUIRE(now.sa_handler == handler);
  sigaction(SIGTERM, nullptr, &now);
  REQUIRE(now.sa_handler == orig_term.sa_handler);  // TERM left the set: back to what it was
  sigaction(SIGUSR2, nullptr, &now);
  REQUIRE(now.sa_handler == handler);
  install_stop_signals("USR1,USR2");  // the same set again: nothing changes
  raise(SIGUSR1);
  REQUIRE(stop_signal() == SIGUSR1);
  restore_stop_signals();
  sigaction(SIGUSR1, nullptr, &now);
  REQUIRE(now.sa_handler == orig_usr1.sa_handler);  // the disposition from before the first install
  sigaction(SIGUSR2, nullptr, &now);
  REQUIRE(now.sa_handler == SIG_DFL);
  clear_stop_request();
}

