#include "src/train/step_metrics.hpp"

namespace ht {

nlohmann::json step_record(const StepMetrics& m) {
  nlohmann::json j = {{"event", "step"},
                      {"step", m.step},
                      {"epoch", m.epoch},
                      {"loss", m.loss ? nlohmann::json(*m.loss) : nlohmann::json(nullptr)},
                      {"lr", m.lr},
                      {"skipped", m.skipped},
                      {"data_ms", m.data_ms},
                      {"forward_ms", m.forward_ms},
                      {"backward_ms", m.backward_ms},
                      {"allreduce_ms", m.allreduce_ms},
                      {"optimizer_ms", m.optimizer_ms},
                      {"step_ms", m.step_ms},
                      {"images_per_s", m.images_per_s}};
  if (m.loss_scale) j["loss_scale"] = *m.loss_scale;
  if (m.replicas_identical) j["replicas_identical"] = *m.replicas_identical;
  for (const auto& [k, v] : m.gpu.fields()) j[k] = v;
  return j;
}

}  // namespace ht
