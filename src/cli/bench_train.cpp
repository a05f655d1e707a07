// hpctrain bench train [--warmup N] [--steps N] [--out FILE] [--section.key value ...]:
// steady-state training throughput on synthetic data (unless data.dir is given), any model. It runs
// the real trainer for warmup + steps optimizer steps and reports the mean of the timed steps:
// images/s (global) and the per-part step times, as JSON (rank 0).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "base/log.hpp"
#include "mpi/dist.hpp"
#include "src/cli/cli_options.hpp"
#include "src/cli/commands.hpp"
#include "src/ops/conv2d.hpp"
#include "src/train/config.hpp"
#include "src/train/precision.hpp"
#include "src/train/trainer.hpp"

namespace ht {

int bench_train(const Args& args) {
  int64_t warmup = 5, steps = 20;
  std::string out;
  Args rest;
  CommandLine cl("hpctrain bench train",
                 "usage: hpctrain bench train [--warmup N] [--steps N] [--out FILE] [--config FILE] [--section.key v ...]\n"
                 "  synthetic data unless --data.dir is given; every train config key is accepted");
  cl.option("warmup", &warmup, "N", "untimed steps first")
      .option("steps", &steps, "N", "timed steps")
      .option("out", &out, "FILE", "write the results as JSON to this file (rank 0)")
      .pass_through(&rest);  // --config and the train config keys: parse_config below
  if (!cl.parse(args)) return kExitOk;
  auto passed = [&](const char* flag) { return std::find(rest.begin(), rest.end(), flag) != rest.end(); };
  const bool synthetic_given = passed("--data.synthetic"), dir_given = passed("--data.dir");
  if (steps <= 0 || warmup < 0) cl.fail("--steps must be > 0 and --warmup >= 0");
  if (!synthetic_given && !dir_given) rest.insert(rest.end(), {"--data.synthetic", "true"});
  const std::string run_dir = (std::filesystem::temp_directory_path() / ("hpctrain-bench-" + std::to_string(::getpid()))).string();
  rest.insert(rest.end(), {"--train.eval", "false", "--train.epochs", "0", "--train.max_steps",
                           std::to_string(warmup + steps), "--checkpoint.every_steps", "0", "--checkpoint.every_minutes",
                           "0", "--train.log_every_steps", "1000000"});
  // The run directory is the bench's own scratch space unless the caller gave one.
  const bool has_dir = passed("--run.dir");
  if (!has_dir) rest.insert(rest.end(), {"--run.dir", run_dir, "--run.fresh", "true"});
  Config cfg = parse_config(rest);
  if (cfg.data.synthetic && cfg.data.synthetic_samples < cfg.train.global_batch * (warmup + steps))
    cfg.data.synthetic_samples = cfg.train.global_batch * (warmup + steps);
  Trainer trainer(cfg);
  trainer.run();
  if (dist().rank == 0) {
    std::ifstream in(std::filesystem::path(cfg.run.dir) / "metrics.jsonl");
    std::string line;
    std::vector<nlohmann::json> recs;
    std::vector<double> losses;  // every step's, warm-up included (non-finite: NaN; JSON writes null)
    int64_t skipped = 0;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line);
      if (j["event"] != "step") continue;
      const auto& l = j["loss"];
      losses.push_back(l.is_number() ? l.get<double>() : std::nan(""));
      skipped += j.value("skipped", false) ? 1 : 0;
      if (j["step"].get<int64_t>() > warmup) recs.push_back(j);
    }
    nlohmann::json res = {{"benchmark", "train"}, {"model", cfg.model.name}, {"device", to_string(cfg.train.device)},
                          {"world_size", dist().world_size}, {"global_batch", cfg.train.global_batch},
                          {"micro_batch", trainer.micro_batch()}, {"accumulation_steps", cfg.train.accumulation_steps},
                          {"threads_per_rank", cfg.train.threads}, {"warmup_steps", warmup}, {"timed_steps", recs.size()},
                          {"height", cfg.data.synthetic_height}, {"width", cfg.data.synthetic_width},
                          {"parameters", trainer.model().params().num_params()},
                          {"precision", to_string(cfg.train.precision)}, {"peak_rss_bytes", peak_rss_bytes()},
                          {"grad_dtype", to_string(cfg.dist.grad_dtype)},
                          // Start-up cost of the convolution fast-path check (docs/precision.md), in the warm-up.
                          {"conv_check_s", conv2d_cpu_check_seconds()}};
    // Bucket timeline of the last timed step on rank 0 (launch time since the step's forward began,
    // bytes per bucket, launch order): scripts/scaling_study.py models overlap from it.
    if (const GradBucketer* b = trainer.bucketer()) {
      res["bucket_launch_ms"] = b->stats().launch_ms;
      std::vector<int64_t> bytes;
      for (const auto& [begin, end] : b->bucket_ranges()) bytes.push_back((end - begin) * static_cast<int64_t>(sizeof(float)));
      res["bucket_bytes"] = bytes;
    }
    for (const char* k : {"step_ms", "data_ms", "forward_ms", "backward_ms", "allreduce_ms", "optimizer_ms"}) {
      double s = 0;
      for (const auto& r : recs) s += r[k].get<double>();
      res[k] = recs.empty() ? 0.0 : s / static_cast<double>(recs.size());
    }
    res["images_per_s"] = res["step_ms"].get<double>() > 0 ? cfg.train.global_batch / (res["step_ms"].get<double>() / 1000) : 0.0;
    // A fast run is worth nothing if it does not train (a low-precision path gone wrong): the losses
    // must be finite and the last no higher than kLossGrowthBound times the first. Synthetic data
    // keeps the loss near ln(classes), so a run that diverges crosses the bound within a few steps.
    constexpr double kLossGrowthBound = 1.5;
    const bool all_finite = std::all_of(losses.begin(), losses.end(), [](double v) { return std::isfinite(v); });
    const double first = losses.empty() ? std::nan("") : losses.front();
    const double last = losses.empty() ? std::nan("") : losses.back();
    const bool losses_ok = !losses.empty() && all_finite && last <= kLossGrowthBound * first;
    res["first_loss"] = std::isfinite(first) ? nlohmann::json(first) : nlohmann::json(nullptr);
    res["last_loss"] = std::isfinite(last) ? nlohmann::json(last) : nlohmann::json(nullptr);
    res["skipped_steps"] = skipped;
    res["loss_bound"] = strf("every loss finite and last_loss <= %.1f x first_loss", kLossGrowthBound);
    res["losses_ok"] = losses_ok;
    if (!losses_ok)
      log_warn(strf("bench train: the losses fail their bound (first %g, last %g, %s): these figures are not "
                    "verified",
                    first, last, all_finite ? "every loss finite" : "a loss is not finite"));
    log_raw_out(strf("bench train: %s, world_size %d, global batch %d: %.1f images/s (step %.2f ms: data %.2f forward %.2f "
                     "backward %.2f allreduce %.2f optimizer %.2f)",
                     cfg.model.name.c_str(), dist().world_size, cfg.train.global_batch, res["images_per_s"].get<double>(),
                     res["step_ms"].get<double>(), res["data_ms"].get<double>(), res["forward_ms"].get<double>(),
                     res["backward_ms"].get<double>(), res["allreduce_ms"].get<double>(), res["optimizer_ms"].get<double>()));
    if (!out.empty()) {
      std::filesystem::path p(out);
      if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
      std::ofstream(out) << res.dump(2) << "\n";
    }
    if (!has_dir) std::filesystem::remove_all(run_dir);
  }
  return kExitOk;
}

}  // namespace ht
