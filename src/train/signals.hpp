#pragma once
// Preemption signals (checkpoint.signals, default "TERM,USR1"). The handler only records the signal
// in a lock-free atomic (async-signal-safe); the trainer polls it at each step boundary, agrees on it
// across ranks (agree_step_flags), saves a checkpoint and exits with code 75. A second signal while
// the checkpoint is being written only sets the flag again, so it cannot interrupt or corrupt the save.
// The handler also tells the collective guard (mpi/collective_guard.hpp): a rank that is stuck in an
// MPI call when the signal comes (a lost peer) ends kStopGraceS later instead of waiting on.
#include <cstdint>
#include <string>
#include <vector>

namespace ht {

/// Keeps asynchronous signals away from the threads that compute. Call first in main(), before MPI
/// and before any other thread exists: blocks the nameable stop signals (TERM, USR1, USR2, INT, HUP,
/// QUIT, XCPU, ALRM, CONT) in the calling thread, so every thread created later inherits the block,
/// and starts one detached receiver thread with no signal blocked that only waits. The kernel then
/// delivers process-directed signals (kill, mpirun/Slurm forwarding) to the receiver, where the
/// handler (or the default action) runs. Why: oneDNN 2.x's JIT sgemm kernels
/// (jit_avx512_common_gemm_f32) point RSP into a heap buffer while they run, so a signal frame pushed
/// onto a computing thread lands in the heap and corrupts it (oneDNN issue #4845, fixed in 3.11;
/// Debian 12 ships 2.7). Seen here as "corrupted size vs. prev_size" after USR1 in about 1 run in 12.
/// Idempotent. Thread-directed signals (raise, pthread_kill) to a blocking thread stay pending.
void isolate_signals_to_receiver_thread();

/// Signal numbers for a comma-separated list of names ("TERM,USR1", "SIGUSR2", "15"). Throws
/// UsageError naming checkpoint.signals and the bad entry.
std::vector<int> parse_signal_list(const std::string& list);

/// Installs the flag-setting handler for `list` (SA_RESTART, so interrupted system calls resume),
/// blocks the listed signals in the calling thread (see isolate_signals_to_receiver_thread)
/// and ignores SIGXFSZ, so that writing past a file-size limit (ulimit -f) fails with EFBIG and is
/// reported instead of killing the process. Calling it again replaces the set.
void install_stop_signals(const std::string& list);
/// Restores the dispositions saved by install_stop_signals.
void restore_stop_signals();
/// End of a run: restores TERM and INT (so a rank stuck while exiting can still be terminated),
/// but keeps the flag-setting handler for the other stop signals (USR1, ...): a launcher or a
/// container runtime's signal proxy (podman run, srun) may deliver a forwarded checkpoint signal to
/// one rank after its peers agreed to stop, and under the default action that rank would die of it
/// (exit 138) after the checkpoint was saved, so Slurm would not requeue the job.
void retire_stop_signals();

/// True once a configured signal arrived on this process.
bool stop_requested();
/// The first signal received (0 when none).
int stop_signal();
/// Clears the flag (tests).
void clear_stop_request();

/// Bits agreed at a step boundary (OR over ranks).
enum StepFlag : uint32_t {
  kFlagStop = 1u << 0,        ///< a stop signal arrived on some rank
  kFlagCheckpoint = 1u << 1,  ///< a time-based checkpoint is due (rank 0's clock)
  kFlagWriteFailed = 1u << 2, ///< rank 0's background checkpoint write failed
  kFlagBudget = 1u << 3,      ///< one more step would cross run.max_* (rank 0's RunBudget, src/train/budget.hpp)
  kFlagSlowRank = 1u << 4,    ///< rank 0's watchdog: one rank slow too long (watchdog.slow_rank_stop_windows)
};
/// OR of `local` over all ranks (one MPI_Allreduce with MPI_BOR on MPI_COMM_WORLD); every rank must
/// call it at the same step boundary. Bounded by dist.timeout_s (a CollectiveWait). Without MPI
/// initialised, returns `local`.
uint32_t agree_step_flags(uint32_t local);

}  // namespace ht
