#pragma once
// The utilisation watchdog (watchdog.* keys, docs/metrics.md#warning): over each window of
// watchdog.window_steps steps rank 0 judges where the step time went and warns, on stderr and as a
// `warning` event in metrics.jsonl, when
//   - the ranks wait for data for more than watchdog.max_data_share of the step (data_loading),
//   - exposed gradient communication takes more than watchdog.max_comm_share of it even on the
//     rank that waits least (exposed_communication),
//   - NVML utilisation of rank 0's GPU stays below watchdog.min_gpu_util_pct (gpu_idle),
//   - one rank's busy time (step minus the wait for gradients) exceeds the median of the others by
//     more than watchdog.max_rank_spread times, and by at least a tenth of the step
//     (slow_rank: names the rank and its host).
// A loss of less than 2 ms per step (data wait, exposed communication, a rank's excess) is never
// reported: it costs little, and at that scale the shares are scheduling noise.
// Each kind is repeated at most once per watchdog.repeat_minutes. The per-rank figures reach rank 0
// by one MPI_Gather of three doubles per rank per window (the per-step collectives are a sum and
// an OR, which cannot carry a per-rank value). The first step after each start (JIT, autotuning)
// is not judged.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/clock.hpp"
#include "src/train/config.hpp"
#include "src/train/step_metrics.hpp"

namespace ht {

class MetricsWriter;

/// One rank's figures over a window, in milliseconds: the median of each over the window's steps
/// (a step held up once by the operating system does not make a window).
struct RankWindow {
  double step_ms = 0;
  double data_ms = 0;
  double allreduce_ms = 0;
};

/// What a watchdog warning is about (its "kind" in metrics.jsonl: to_string).
enum class WatchdogKind { data_loading, exposed_communication, gpu_idle, slow_rank };
/// "data_loading", "exposed_communication", "gpu_idle", "slow_rank".
const char* to_string(WatchdogKind k);

/// A warning: its kind, the sentence that names the likely cause, the knobs to turn, and the
/// figures it rests on (JSON fields).
struct WatchdogWarning {
  WatchdogKind kind = WatchdogKind::data_loading;
  std::string message;
  std::string knob;
  nlohmann::json figures = nlohmann::json::object();
};

/// Judges one window (no rate limit, no I/O): `ranks` by rank, `hosts` by rank (may be shorter:
/// then "?"), `gpu_util_pct` rank 0's mean NVML utilisation when sampled, `prefetch` whether
/// data.prefetch is on (it changes the advice).
std::vector<WatchdogWarning> judge_window(const std::vector<RankWindow>& ranks, const std::vector<std::string>& hosts,
                                          std::optional<double> gpu_util_pct, const Config::Watchdog& opt,
                                          bool prefetch);

class Watchdog {
 public:
  Watchdog(const Config::Watchdog& opt, bool prefetch, int rank, int world_size, std::vector<std::string> hosts);
  /// Every rank after every step (collective every window_steps judged steps: all ranks call it at
  /// the same steps). Rank 0 writes the warnings that pass the rate limit to stderr and `metrics`
  /// and returns them; other ranks return none.
  std::vector<WatchdogWarning> on_step(const StepMetrics& m, MetricsWriter* metrics,
                                       SteadyClock::time_point now = SteadyClock::now());
  /// Warnings emitted so far (rank 0).
  int64_t emitted() const { return emitted_; }
  /// Rank 0, with watchdog.slow_rank_stop_windows > 0: the reason to stop ("rank 3 on host node2 judged
  /// slow in 4 windows in a row (steps 2-201); ...") once the same rank has been judged slow_rank in
  /// that many consecutive windows (judged, whether or not the warning was printed); else nullopt.
  std::optional<std::string> slow_rank_stop() const { return slow_stop_; }

 private:
  Config::Watchdog opt_;
  bool prefetch_;
  int rank_, world_;
  std::vector<std::string> hosts_;
  bool warm_ = false;           ///< the first step after start is skipped
  int64_t n_ = 0, first_step_ = 0;
  std::vector<double> step_ms_, data_ms_, allreduce_ms_;  ///< this window's steps
  double gpu_util_sum_ = 0;
  int64_t gpu_samples_ = 0;
  std::map<WatchdogKind, SteadyClock::time_point> last_;  ///< kind -> last emission
  int64_t emitted_ = 0;
  int slow_rank_ = -1;        ///< the rank judged slow in the latest windows, -1: none
  int64_t slow_windows_ = 0;  ///< how many windows in a row
  int64_t slow_since_ = 0;    ///< first step of the first of them
  std::optional<std::string> slow_stop_;
};

}  // namespace ht
