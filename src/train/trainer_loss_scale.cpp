// The loss-scaling part of the step (src/train/loss_scaler.hpp): the backward seed, the unscale of
// the averaged gradients and the scale's update once every rank agreed on the step's finiteness.
#include "src/ops/elementwise.hpp"
#include "src/train/trainer.hpp"

namespace ht {

float Trainer::loss_seed(int accumulation_steps) const {
  // scale / A equals (1 / A) x scale exactly: the scale is a power of two.
  const float scale = scaler_ ? static_cast<float>(scaler_->scale()) : 1.0f;
  return scale / static_cast<float>(accumulation_steps);
}

void Trainer::finish_loss_scale(bool finite, StepMetrics& m) {
  m.loss_scale = scaler_->scale();
  // The exchange divided by world_size x scale already when the communicator fuses it (MPI);
  // otherwise (one rank, NCCL without it) one pass here. Exact either way: a power of two.
  if (finite && !unscale_fused_) scale_inplace(model_->params().flat_grads(), scaler_->inverse());
  m.loss_scale_backoff = scaler_->update(!finite);
}

}  // namespace ht
