#include "src/train/budget.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace ht {

Spend previous_spend(const std::string& metrics_path, double price) {
  Spend s;
  std::ifstream in(metrics_path);
  if (!in) return s;
  double seg_start = -1, seg_last = -1;
  int seg_devices = 0;
  auto close_segment = [&] {
    if (seg_start >= 0 && seg_last > seg_start) {
      const double h = (seg_last - seg_start) / 3600.0;
      s.wall_hours += h;
      s.gpu_hours += h * seg_devices;
    }
    seg_start = seg_last = -1;
  };
  std::string line;
  while (std::getline(in, line)) {
    // Only run_start lines are parsed whole; of the others (one per step) the time alone is read.
    if (line.find("\"run_start\"") == std::string::npos) {
      const size_t k = line.find("\"time\":");
      if (seg_start < 0 || k == std::string::npos || line.back() != '}') continue;  // a line cut by a kill
      char* end = nullptr;
      const double t = std::strtod(line.c_str() + k + 7, &end);
      if (end != line.c_str() + k + 7) seg_last = std::max(seg_last, t);
      continue;
    }
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("time") || !j["time"].is_number()) continue;  // a line cut by a kill
    const double t = j["time"].get<double>();
    if (j.value("event", "") == "run_start") {
      close_segment();
      const std::string cfg = j.value("config", "");
      if (cfg.find("\nfresh = true\n") != std::string::npos) s = {};  // this start began the run anew
      seg_start = seg_last = t;
      seg_devices = j.value("world_size", 1);
    } else if (seg_start >= 0) {
      seg_last = std::max(seg_last, t);
    }
  }
  close_segment();
  s.cost = s.gpu_hours * price;
  return s;
}

RunBudget::RunBudget(const Config::Run& run, int devices, Spend previous, bool gpu)
    : run_(run), devices_(std::max(1, devices)), previous_(previous), gpu_(gpu) {}

void RunBudget::begin(SteadyClock::time_point t) { t0_ = t; }

void RunBudget::on_step(double step_ms) {
  recent_ms_.push_back(step_ms);
  if (recent_ms_.size() > 5) recent_ms_.pop_front();
}

Spend RunBudget::spent(SteadyClock::time_point now) const {
  const double h = std::chrono::duration<double>(now - t0_).count() / 3600.0;
  Spend s = previous_;
  s.wall_hours += h;
  s.gpu_hours += h * devices_;
  s.cost = s.gpu_hours * run_.price_per_gpu_hour;
  return s;
}

bool RunBudget::limited() const { return run_.max_hours > 0 || run_.max_gpu_hours > 0 || run_.max_cost > 0; }

std::optional<std::string> RunBudget::would_cross(SteadyClock::time_point now) const {
  if (!limited()) return std::nullopt;
  const double next_ms = recent_ms_.empty() ? 0 : *std::max_element(recent_ms_.begin(), recent_ms_.end());
  const double ahead_h = (next_ms / 1000.0 + checkpoint_s_) / 3600.0;
  const Spend s = spent(now);
  const Spend then{s.wall_hours + ahead_h, s.gpu_hours + ahead_h * devices_,
                   (s.gpu_hours + ahead_h * devices_) * run_.price_per_gpu_hour};
  char buf[320];
  auto text = [&](const char* key, double limit, double spent_v, double then_v, const char* unit) {
    std::snprintf(buf, sizeof buf,
                  "%s = %g would be crossed by one more step and the checkpoint (%.4g %s spent so far, %.4g after them)",
                  key, limit, spent_v, unit, then_v);
    return std::string(buf);
  };
  if (run_.max_hours > 0 && then.wall_hours >= run_.max_hours)
    return text("run.max_hours", run_.max_hours, s.wall_hours, then.wall_hours, "wall hours");
  if (run_.max_gpu_hours > 0 && then.gpu_hours >= run_.max_gpu_hours)
    return text("run.max_gpu_hours", run_.max_gpu_hours, s.gpu_hours, then.gpu_hours, gpu_ ? "GPU-hours" : "rank-hours");
  if (run_.max_cost > 0 && then.cost >= run_.max_cost)
    return text("run.max_cost", run_.max_cost, s.cost, then.cost, "cost");
  return std::nullopt;
}

std::string RunBudget::console_text(SteadyClock::time_point now) const {
  const Spend s = spent(now);
  char buf[96];
  if (run_.price_per_gpu_hour > 0)
    std::snprintf(buf, sizeof buf, " cost %.2f (%.3g %s)", s.cost, s.gpu_hours, gpu_ ? "GPU-h" : "rank-h");
  else
    std::snprintf(buf, sizeof buf, " %.3g %s", s.gpu_hours, gpu_ ? "GPU-h" : "rank-h");
  return buf;
}

nlohmann::json RunBudget::fields(SteadyClock::time_point now) const {
  const Spend s = spent(now);
  return {{"wall_hours", s.wall_hours}, {"gpu_hours", s.gpu_hours}, {"cost", s.cost},
          {"price_per_gpu_hour", run_.price_per_gpu_hour}};
}

}  // namespace ht
