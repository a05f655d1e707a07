// Evaluation on the test split and the replica check: the trainer's read-only passes over the
// model, both collective.
#include <cstdio>

#include "mpi/dist.hpp"
#include "base/clock.hpp"
#include "base/hash.hpp"
#include "base/log.hpp"
#include "src/ops/softmax_xent.hpp"
#include "src/train/trainer.hpp"

namespace ht {

bool Trainer::check_replicas() {
  // FNV-1a over the parameter bytes; every rank must hold exactly rank 0's parameters.
  Tensor host = model_->params().flat_values().to(Device::cpu);
  Fnv1a fnv;
  fnv.update(host.raw(), host.nbytes());
  const uint64_t h = fnv.value();
  const auto [lo, hi] = dist_min_max(h, "replica check (MPI_Allreduce)");
  if (lo != hi)
    throw RuntimeError("step " + std::to_string(prog_.step) + ": parameters differ between ranks (rank " +
                       std::to_string(rank_) + " hash " + std::to_string(h) + ")");
  return true;
}

void Trainer::evaluate(int epoch) {
  const auto t0 = SteadyClock::now();
  // Running statistics differ per rank (each saw its own samples): average them first.
  auto& bufs = model_->params().flat_buffers();
  if (world_ > 1) comm_->allreduce_average(std::span<float>(bufs.data<float>(), static_cast<size_t>(bufs.numel())));
  double loss_sum = 0, correct = 0, count = 0;
  test_loader_->start_epoch(0);
  Batch b;
  PassOptions po;
  po.training = false;
  while (test_loader_->next(b)) {
    const Tensor* x = &b.images;
    const Tensor* y = &b.labels;
    if (device_ != Device::cpu) {
      x_dev_.ensure(b.images.shape(), DType::f32, device_);
      y_dev_.ensure(b.labels.shape(), DType::i32, device_);
      x_dev_.copy_from(b.images);
      y_dev_.copy_from(b.labels);
      x = &x_dev_;
      y = &y_dev_;
    }
    const Tensor& logits = model_->forward(*x, po);
    probs_.ensure(logits.shape(), DType::f32, device_);
    int64_t c = 0;
    const double l = softmax_xent_forward(logits, *y, 0.f, probs_, &c);
    const double n = static_cast<double>(b.labels.numel());
    loss_sum += l * n;
    correct += static_cast<double>(c);
    count += n;
  }
  loss_sum = dist_sum(loss_sum);
  correct = dist_sum(correct);
  count = dist_sum(count);
  summary_.test_loss = count > 0 ? loss_sum / count : 0;
  summary_.test_top1 = count > 0 ? correct / count : 0;
  if (rank_ == 0) {
    const double ms = ms_since(t0);
    log_info(strf("[epoch %d] test loss %.4f top1 %.4f over %.0f samples (%.1f s)", epoch + 1, summary_.test_loss,
                  summary_.test_top1, count, ms / 1000));
    metrics_->write({{"event", "eval"}, {"epoch", epoch + 1}, {"step", prog_.step}, {"loss", summary_.test_loss},
                     {"top1", summary_.test_top1}, {"samples", static_cast<int64_t>(count)}, {"eval_ms", ms}});
  }
}

void Trainer::evaluate_final_again() {
  // The epoch the last step belongs to (0-based): the one just finished, or the one max_steps ended inside.
  const int epoch = prog_.step_in_epoch == 0 && prog_.epoch > 0 ? prog_.epoch - 1 : prog_.epoch;
  if (rank_ == 0)
    log_info(strf("resumed at the final step %lld: evaluating the final model again for the run's record",
                  static_cast<long long>(prog_.step)));
  TraceSpan s(trace_, "evaluate");
  evaluate(epoch);
}

}  // namespace ht
