#pragma once
// The figures of one training step, typed. The trainer fills one StepMetrics per step (applied or
// skipped) and step_record() turns it into the `step` record of metrics.jsonl: the one place where
// these names become JSON keys (docs/metrics.md).
#include <cstdint>
#include <optional>

#include <nlohmann/json.hpp>

#include "cuda/nvml_monitor.hpp"

namespace ht {

struct StepMetrics {
  int64_t step = 0;  ///< 1-based number of this step (a skipped step keeps the number the next applied step takes)
  int epoch = 0;     ///< 1-based epoch
  std::optional<double> loss;  ///< training loss, mean over the global batch; empty when not finite (JSON null)
  double lr = 0;               ///< learning rate of this step (the schedule's float value)
  bool skipped = false;        ///< a loss or gradient was not finite on some rank: no update
  std::optional<double> loss_scale;  ///< with loss scaling: the scale this step's loss was multiplied by
  bool loss_scale_backoff = false;   ///< skipped, and the loss scale halved (not counted towards max_nonfinite_steps)
  double data_ms = 0;          ///< waiting for this rank's batch on the compute device
  double forward_ms = 0;       ///< forward passes and loss, summed over the micro-batches
  double backward_ms = 0;      ///< backward passes, summed over the micro-batches
  double allreduce_ms = 0;     ///< waiting for the last gradient buckets after backward (0 on one rank)
  double optimizer_ms = 0;     ///< the parameter update (0 when skipped)
  double step_ms = 0;          ///< the whole step: data to optimizer
  double images_per_s = 0;     ///< global batch / step_ms
  std::optional<bool> replicas_identical;  ///< set on steps where dist.check_replicas_every verified the parameters
  NvmlSnapshot gpu;            ///< GPU runs with NVML: the gpu_* fields (none when !gpu.valid)
};

/// The metrics.jsonl `step` record: event "step", step, epoch, loss (null when not finite), lr,
/// skipped, data_ms, forward_ms, backward_ms, allreduce_ms, optimizer_ms, step_ms, images_per_s,
/// loss_scale when scaling, replicas_identical when set, and the NVML fields (NvmlSnapshot::fields) when valid. Times in ms.
nlohmann::json step_record(const StepMetrics& m);

}  // namespace ht
