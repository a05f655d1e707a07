#pragma once
// One job at a time per run directory. Rank 0 holds an exclusive lock (flock) on RUN_DIR/.owner for
// the whole run and writes who holds it (host, process id, Slurm job id, start time) into the file.
// A second job on the same run directory waits up to a limit for the lock (a job whose mpirun was
// SIGKILLed leaves ranks running for about a second, still writing checkpoints), then stops with a
// usage error naming the holder. The kernel drops the lock when the holder exits, however it exits,
// so no stale lock is ever left behind. See docs/run_directory.md.
#include <string>

namespace ht {

class RunDirLock {
 public:
  /// Creates RUN_DIR if needed, then takes the lock, retrying for `wait_s` seconds. Throws
  /// UsageError naming the run directory and the holder recorded in RUN_DIR/.owner when another
  /// process keeps it, and RuntimeError when the file cannot be created.
  RunDirLock(const std::string& run_dir, double wait_s);
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

  /// "host H, process P, job J, since T" for messages.
  static std::string describe_holder(const std::string& owner_file_text);

 private:
  int fd_ = -1;
};

/// How long a new job waits for a previous owner of the run directory to exit (seconds).
constexpr double kRunDirLockWaitS = 15;

}  // namespace ht
