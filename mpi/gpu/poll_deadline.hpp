#pragma once
// Host-side timeout logic for GPU collectives, kept free of CUDA/NCCL so it is unit-tested on the
// CPU (tests/unit/test_poll_deadline.cpp): a poll-with-deadline loop, the summary of the NCCL_*
// environment variables in effect, and the timeout message NcclCommunicator throws.
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace ht {

/// Calls `done()` until it returns true (then returns true) or `timeout_s` seconds have passed since
/// the call began (then returns false). timeout_s <= 0 means no limit. Between polls it sleeps,
/// starting at 1 microsecond and doubling up to `max_sleep_us`, so a quick operation is seen at once
/// and a long one costs little CPU. Exceptions thrown by `done` propagate. `done` is always called
/// at least once, also with a deadline already past.
template <class Pred>
bool poll_with_deadline(Pred&& done, double timeout_s, int max_sleep_us = 1000) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  int sleep_us = 1;
  for (;;) {
    if (done()) return true;
    if (timeout_s > 0 && std::chrono::duration<double>(clock::now() - start).count() >= timeout_s) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
    if (sleep_us < max_sleep_us) sleep_us = sleep_us * 2 > max_sleep_us ? max_sleep_us : sleep_us * 2;
  }
}

/// "NAME=value" for every environment entry of `env` (a NULL-terminated array like `environ`) whose
/// name starts with NCCL_, sorted; "(no NCCL_* variables set)" when there is none.
std::string nccl_settings_text(char** env);
/// The same for this process's environment.
std::string nccl_settings_text();

/// The message of a collective that did not complete in time: rank and host, the operation, the
/// limit, that the communicator was aborted, what a probe of the peers found (`probe_result`, from
/// probe_peers_text in mpi/collective_guard.hpp: the lost peers and their hosts), the likely causes,
/// the NCCL_* settings and the hint to rerun with NCCL_DEBUG=INFO.
std::string nccl_timeout_message(int rank, const std::string& host, const std::string& operation, double timeout_s,
                                 const std::string& nccl_settings, const std::string& probe_result);

}  // namespace ht
