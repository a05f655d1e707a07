#include "base/stats.hpp"
#include "src/train/watchdog.hpp"


#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "io/metrics.hpp"
#include "mpi/dist.hpp"
#include "base/log.hpp"
#include "base/test_faults.hpp"
#include "base/enum_names.hpp"

namespace ht {

const char* to_string(WatchdogKind k) {
  using K = WatchdogKind;
  static constexpr std::pair<K, const char*> kNames[] = {{K::data_loading, "data_loading"},
                                                         {K::exposed_communication, "exposed_communication"},
                                                         {K::gpu_idle, "gpu_idle"},
                                                         {K::slow_rank, "slow_rank"}};
  return enum_name(k, kNames);
}
namespace {

double share(double part, double whole) { return whole > 0 ? part / whole : 0; }

// A loss below this many milliseconds per step is not worth a warning (and at that scale the shares
// are scheduling noise).
constexpr double kMinWorthMs = 2.0;

double median_data_ms(const std::vector<RankWindow>& r) {
  std::vector<double> v;
  for (const auto& x : r) v.push_back(x.data_ms);
  return median(v);
}

double min_comm_ms(const std::vector<RankWindow>& r) {
  double m = r.front().allreduce_ms;
  for (const auto& x : r) m = std::min(m, x.allreduce_ms);
  return m;
}

std::string pct(double fraction) {
  char b[32];
  std::snprintf(b, sizeof b, "%.0f%%", 100 * fraction);
  return b;
}

std::string ms(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f ms", v);
  return b;
}

}  // namespace

std::vector<WatchdogWarning> judge_window(const std::vector<RankWindow>& ranks, const std::vector<std::string>& hosts,
                                          std::optional<double> gpu_util_pct, const Config::Watchdog& opt,
                                          bool prefetch) {
  std::vector<WatchdogWarning> out;
  if (ranks.empty()) return out;
  auto host = [&](size_t r) { return r < hosts.size() ? hosts[r] : std::string("?"); };
  // ---- a slow rank: its busy time (step minus the wait for the others' gradients) against the others' ----
  bool slow_rank = false;
  if (ranks.size() >= 2) {
    std::vector<double> busy;
    for (const auto& r : ranks) busy.push_back(std::max(0.0, r.step_ms - r.allreduce_ms));
    const size_t s = static_cast<size_t>(std::max_element(busy.begin(), busy.end()) - busy.begin());
    std::vector<double> others, others_data;
    for (size_t r = 0; r < ranks.size(); ++r)
      if (r != s) others.push_back(busy[r]), others_data.push_back(ranks[r].data_ms);
    const double med = median(others), med_data = median(others_data);
    // Below 2 ms or a tenth of the step the difference costs little and is mostly scheduling noise.
    const double excess = busy[s] - med;
    if (med > 0 && busy[s] > opt.max_rank_spread * med && excess >= kMinWorthMs && excess >= 0.1 * ranks[s].step_ms) {
      slow_rank = true;
      const bool data_cause = ranks[s].data_ms - med_data > 0.5 * (busy[s] - med);
      WatchdogWarning w;
      w.kind = WatchdogKind::slow_rank;
      w.message = "rank " + std::to_string(s) + " on host " + host(s) + " is busy " + ms(busy[s]) +
                  " per step against a median of " + ms(med) + " on the other ranks, which wait for it: " +
                  (data_cause ? "its data loading is slow (" + ms(ranks[s].data_ms) + " per step; disk or file system of " +
                                    host(s) + ")"
                              : "its compute is slow (a slower, throttled or shared GPU or CPU on " + host(s) + ")");
      w.knob = data_cause ? "data.stage_dir (node-local copy), data.prefetch; or exclude host " + host(s)
                          : "check host " + host(s) + " (nvidia-smi, other jobs, hpctrain doctor) or exclude it";
      w.figures = {{"rank", s}, {"host", host(s)}, {"busy_ms", busy[s]}, {"median_busy_ms", med},
                   {"data_ms", ranks[s].data_ms}};
      out.push_back(w);
    }
  }
  // ---- waiting for data (median over ranks; one slow rank is the slow_rank case) ----
  std::vector<double> data_share, comm_share;
  for (const auto& r : ranks) {
    data_share.push_back(share(r.data_ms, r.step_ms));
    comm_share.push_back(share(r.allreduce_ms, r.step_ms));
  }
  const double ds = median(data_share);
  bool data_slow = false;
  if (!slow_rank && ds > opt.max_data_share && median_data_ms(ranks) >= kMinWorthMs) {
    data_slow = true;
    WatchdogWarning w;
    w.kind = WatchdogKind::data_loading;
    w.message = "waiting for data takes " + pct(ds) + " of the step (median over ranks, " + ms(ranks[0].data_ms) +
                " of " + ms(ranks[0].step_ms) + " on rank 0; limit watchdog.max_data_share = " +
                pct(opt.max_data_share) + "): the input pipeline, not the model, sets the pace";
    w.knob = prefetch ? "data.stage_dir (read from node-local disk), fewer or lighter augmentations, more CPU "
                        "cores per rank (train.threads)"
                      : "data.prefetch = true (it is off), data.stage_dir (read from node-local disk)";
    w.figures = {{"data_share", ds}, {"data_ms", ranks[0].data_ms}, {"step_ms", ranks[0].step_ms}};
    out.push_back(w);
  }
  // ---- exposed communication: even the rank that waits least waits for gradients ----
  const double cs = *std::min_element(comm_share.begin(), comm_share.end());
  if (!slow_rank && ranks.size() >= 2 && cs > opt.max_comm_share && min_comm_ms(ranks) >= kMinWorthMs) {
    WatchdogWarning w;
    w.kind = WatchdogKind::exposed_communication;
    w.message = "exposed gradient communication takes " + pct(cs) + " of the step on every rank (" +
                ms(ranks[0].allreduce_ms) + " of " + ms(ranks[0].step_ms) + " on rank 0; limit "
                "watchdog.max_comm_share = " + pct(opt.max_comm_share) + "): backward does not hide the allreduce";
    w.knob = "dist.bucket_mb (smaller buckets start sooner), a larger batch per rank (train.global_batch), "
             "the network (hpctrain bench allreduce)";
    w.figures = {{"comm_share", cs}, {"allreduce_ms", ranks[0].allreduce_ms}, {"step_ms", ranks[0].step_ms}};
    out.push_back(w);
  }
  // ---- an idle GPU ----
  if (gpu_util_pct && *gpu_util_pct < opt.min_gpu_util_pct) {
    WatchdogWarning w;
    w.kind = WatchdogKind::gpu_idle;
    char b[64];
    std::snprintf(b, sizeof b, "%.0f%%", *gpu_util_pct);
    w.message = std::string("rank 0's GPU was busy ") + b + " of the time (NVML; limit watchdog.min_gpu_util_pct = " +
                pct(opt.min_gpu_util_pct / 100) + "): " +
                (data_slow ? "it waits for data (see the data_loading warning)"
                 : slow_rank ? "it waits for the slow rank"
                             : "the kernels are too small to fill it or the host launches too slowly");
    w.knob = data_slow ? "data.prefetch, data.stage_dir" : "a larger batch per rank (train.global_batch)";
    w.figures = {{"gpu_util_pct", *gpu_util_pct}};
    out.push_back(w);
  }
  return out;
}

Watchdog::Watchdog(const Config::Watchdog& opt, bool prefetch, int rank, int world_size, std::vector<std::string> hosts)
    : opt_(opt), prefetch_(prefetch), rank_(rank), world_(world_size), hosts_(std::move(hosts)) {}

std::vector<WatchdogWarning> Watchdog::on_step(const StepMetrics& m, MetricsWriter* metrics,
                                               SteadyClock::time_point now) {
  if (!opt_.enabled) return {};
  if (!warm_) {  // the first step after a start: JIT compilation, cuDNN autotuning, first reads
    warm_ = true;
    return {};
  }
  if (n_ == 0) first_step_ = m.step;
  ++n_;
  step_ms_.push_back(m.step_ms);
  data_ms_.push_back(m.data_ms);
  allreduce_ms_.push_back(m.allreduce_ms);
  if (m.gpu.valid) gpu_util_sum_ += m.gpu.gpu_util_pct, ++gpu_samples_;
  if (n_ < opt_.window_steps) return {};
  // A step's collective like the others, bounded: a peer lost here must not leave rank 0 waiting.
  const std::vector<double> all = dist_gather_to_root({median(step_ms_), median(data_ms_), median(allreduce_ms_)},
                                                      "watchdog window (MPI_Gather of the ranks' step times)");
  std::optional<double> gpu;
  if (gpu_samples_ > 0) gpu = gpu_util_sum_ / static_cast<double>(gpu_samples_);
  const int64_t first = first_step_, last = m.step;
  n_ = 0;
  step_ms_.clear(), data_ms_.clear(), allreduce_ms_.clear();
  gpu_util_sum_ = 0;
  gpu_samples_ = 0;
  if (rank_ != 0) return {};
  std::vector<RankWindow> ranks;
  for (int r = 0; r < world_; ++r) ranks.push_back({all[3 * r], all[3 * r + 1], all[3 * r + 2]});
  std::vector<WatchdogWarning> out;
  std::vector<WatchdogWarning> judged = judge_window(ranks, hosts_, gpu, opt_, prefetch_);
  // The slow-rank streak (watchdog.slow_rank_stop_windows): judged, not only printed, windows count.
  int slow = -1;
  for (const auto& w : judged)
    if (w.kind == WatchdogKind::slow_rank) slow = w.figures.value("rank", -1);
  if (slow >= 0 && slow == slow_rank_) {
    ++slow_windows_;
  } else {
    slow_rank_ = slow;
    slow_windows_ = slow >= 0 ? 1 : 0;
    slow_since_ = first;
  }
  if (opt_.slow_rank_stop_windows > 0 && slow_windows_ >= opt_.slow_rank_stop_windows && !slow_stop_) {
    const std::string host = static_cast<size_t>(slow_rank_) < hosts_.size() ? hosts_[static_cast<size_t>(slow_rank_)] : "?";
    slow_stop_ = "rank " + std::to_string(slow_rank_) + " on host " + host + " judged slow in " +
                 std::to_string(slow_windows_) + " watchdog windows in a row (steps " + std::to_string(slow_since_) + "-" +
                 std::to_string(last) + "; watchdog.slow_rank_stop_windows = " +
                 std::to_string(opt_.slow_rank_stop_windows) + ")";
  }
  for (auto& w : judged) {
    auto it = last_.find(w.kind);
    if (it != last_.end() && now - it->second < std::chrono::duration<double>(opt_.repeat_minutes * 60)) continue;
    last_[w.kind] = now;
    ++emitted_;
    log_raw_err("hpctrain: warning (watchdog, steps " + std::to_string(first) + "-" + std::to_string(last) +
                "): " + w.message + "; knob: " + w.knob);
    if (metrics) {
      nlohmann::json j = {{"event", "warning"}, {"source", "watchdog"}, {"kind", to_string(w.kind)},
                          {"step", last},      {"first_step", first},   {"message", w.message},
                          {"knob", w.knob}};
      for (auto& [key, v] : w.figures.items()) j[key] = v;
      metrics->write(j);
    }
    out.push_back(std::move(w));
  }
  return out;
}

}  // namespace ht
