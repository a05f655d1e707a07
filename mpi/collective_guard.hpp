#pragma once
// Time limits on blocking MPI calls, whatever the transport does (docs/exit_codes.md#lost-peers).
//
// A blocking MPI call waits for peers. Over TCP a dead node or a downed link shows as nothing at all:
// the kernel retransmits for many minutes and MPI waits on. So every wait a training run makes on its
// peers is registered here (CollectiveWait, a scope around the call), and one watchdog thread ends the
// rank when a wait outlives its limit:
//   - WaitKind::bounded (the step's collectives, agreements, finalize): at most the time limit
//     (dist.timeout_s) from the start of the call;
//   - WaitKind::while_peers_answer (waits behind one rank's long local work: vetting, reading or
//     writing a checkpoint): without limit while every peer answers a probe sent every time limit.
// Then it probes every peer (a UDP datagram answered by a thread on each rank, mpi/peer_beacon.hpp, so
// that a dead peer cannot make the probe hang inside MPI; where UDP does not reach every rank, a
// one-int message to a responder thread over a private duplicate of MPI_COMM_WORLD), waiting
// kProbeWindowS for the answers, prints one line naming the peers that
// did not answer with their hosts (or, without probes, every peer), waits kExitLingerS, flushes the
// logs and ends the process with _exit: no MPI_Finalize, no MPI_Abort (both can block on a broken job; every
// rank has its own watchdog, and the launcher ends the rest on the non-zero exit).
//
// A stop signal (note_stop_signal, called by the handler of src/train/signals.cpp) shortens the
// bounded limit to kStopGraceS after the signal, so a rank told to stop while stuck in MPI ends; if
// the signal finds it in a bounded wait, a quick probe (kSignalProbeS) names the peers that do not
// answer at once (a launcher ending a job that lost a node sends SIGKILL a second after SIGTERM).
//
// Without collective_guard_start (unit tests, tools) CollectiveWait does nothing.
#include <mpi.h>

#include <functional>
#include <string>
#include <vector>

namespace ht {

enum class WaitKind { bounded, while_peers_answer };

/// Seconds a probe waits for the peers' answers.
constexpr double kProbeWindowS = 5.0;
/// Seconds of the quick probe made when a stop signal finds the rank waiting on peers.
constexpr double kSignalProbeS = 0.5;
/// Seconds a bounded wait may still take after a stop signal.
constexpr double kStopGraceS = 10.0;
/// Seconds a rank that gave up waits after its message before ending (the peers waiting in the same
/// collective give up within moments and print theirs before the launcher kills them).
constexpr double kExitLingerS = 2.0;
/// Seconds given to flushing the logs before _exit.
constexpr double kExitFlushS = 2.0;
/// The grace docs state: a rank ends at most this long after its time limit.
constexpr double kGuardGraceS = kProbeWindowS + kExitLingerS + kExitFlushS + 1.0;

/// Starts the watchdog thread with time limit `limit_s` (> 0) and ignores SIGPIPE (a write on a dead
/// peer's connection must fail inside MPI, not end the rank). Call once, before MPI_Init (which it
/// bounds too) and after src/train/signals.hpp's isolate_signals_to_receiver_thread, so the thread
/// inherits the blocked stop signals. Idempotent.
void collective_guard_start(double limit_s);
/// True after collective_guard_start.
bool collective_guard_running();
/// Sets the time limit of every later wait and of the waits in progress (dist.timeout_s), seconds;
/// <= 0 means no limit.
void set_collective_time_limit(double limit_s);
/// The current time limit in seconds.
double collective_time_limit();

/// Collective over `world` (after MPI_Init, with the guard running): sets up the probes (the UDP
/// beacon, peer_beacon_attach; a duplicate of `world` and the responder thread for the MPI probe);
/// `hosts` (indexed by rank) name the peers in messages.
void collective_guard_attach(MPI_Comm world, int rank, const std::vector<std::string>& hosts);
/// Stops the responder thread (before MPI_Finalize). Local.
void collective_guard_detach();

/// Records a stop signal. Async-signal-safe (one lock-free atomic store).
void note_stop_signal(int signo) noexcept;

/// Registers one blocking wait on peers for its lifetime. `what` names it in the message ("dist_any",
/// "MPI_Finalize", ...) and must outlive the scope (a literal). `exit_code` is what the rank exits
/// with when the wait is given up (docs/exit_codes.md). While a while_peers_answer scope is open on a
/// thread, the scopes nested in it on that thread register nothing (the outer one covers them).
class CollectiveWait {
 public:
  explicit CollectiveWait(const char* what, WaitKind kind = WaitKind::bounded, int exit_code = 1);
  ~CollectiveWait();
  CollectiveWait(const CollectiveWait&) = delete;
  CollectiveWait& operator=(const CollectiveWait&) = delete;

 private:
  int slot_ = -1;
  bool relaxed_ = false;
  bool counted_ = false;  ///< counted in this thread's open scopes (collective_wait_open)
  int unwinding_ = 0;     ///< std::uncaught_exceptions() at construction
};

/// Probes every peer as the watchdog does (at most `window_s` seconds; the UDP beacon, else over MPI)
/// and says what it found: "lost peers (no answer to a probe within 5.0 s): node2 (ranks 2, 3)",
/// "every peer answered a probe: ...", or, where no probe is set up, "could not probe the peers; the
/// peers were: ...". For the messages of waits the watchdog does not end itself (NCCL's time limit).
std::string probe_peers_text(double window_s);

/// True while the calling thread is inside a CollectiveWait scope, or when the guard is not running:
/// a blocking MPI call made where this is false has no time limit. For audits of the call sites
/// (tests/guard/mpi_guard_audit.cpp checks every blocking MPI call of a run through the MPI profiling
/// interface).
bool collective_wait_open();

/// The ranks that did not answer a probe within `window_s` (needs collective_guard_attach; empty
/// otherwise). Callable from any thread; used by the watchdog, exposed for tests.
std::vector<int> probe_unanswered_peers(double window_s, const std::function<bool()>& cut_short = {});

/// "nodeB (ranks 2, 3), nodeC (rank 4)" for `ranks`, by the hosts given to collective_guard_attach.
std::string describe_ranks(const std::vector<int>& ranks);

/// Ends the process with `code` after a bounded flush of stdout and stderr (_exit, no MPI). Any thread.
[[noreturn]] void exit_without_mpi(int code);

}  // namespace ht
