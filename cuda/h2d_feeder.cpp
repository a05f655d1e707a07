// Host code of the input pipeline (CUDA runtime API only); empty in CPU-only builds.
#include "cuda/h2d_feeder.hpp"

#if defined(HT_HAVE_CUDA)
#include <cstring>

#include "cuda/check.hpp"
#include "cuda/cuda_context.hpp"

namespace ht::cuda {

struct H2DFeeder::Slot {
  void* pinned = nullptr;        // images then labels, page-locked for truly asynchronous copies
  size_t pinned_bytes = 0;
  Tensor images, labels;         // device copies
  cudaEvent_t copied = nullptr;  // recorded on the copy stream after the H2D copy
  cudaEvent_t compute_done = nullptr;  // recorded on the compute stream just before the copy is issued
  ~Slot() {
    // A batch staged but never taken may still be in flight: the pinned source must not be freed,
    // and the device buffers (freed stream-ordered on the compute stream, which never waited on
    // this copy) must not be handed out again, before the copy has finished.
    if (copied) (void)cudaEventSynchronize(copied);
    if (pinned) cudaFreeHost(pinned);
    if (copied) cudaEventDestroy(copied);
    if (compute_done) cudaEventDestroy(compute_done);
  }
};

H2DFeeder::H2DFeeder() {
  for (auto& s : slots_) {
    s = std::make_unique<Slot>();
    HT_CUDA_CHECK(cudaEventCreateWithFlags(&s->copied, cudaEventDisableTiming));
    HT_CUDA_CHECK(cudaEventCreateWithFlags(&s->compute_done, cudaEventDisableTiming));
  }
}

H2DFeeder::~H2DFeeder() = default;

void H2DFeeder::stage(const Tensor& images, const Tensor& labels) {
  if (staged_ == 2) throw RuntimeError("H2DFeeder::stage: both slots hold batches not yet taken");
  Slot& s = *slots_[next_];
  Context& c = ctx();
  const size_t ib = images.nbytes(), lb = labels.nbytes();
  // The pinned buffer may still be the source of this slot's previous copy.
  HT_CUDA_CHECK(cudaEventSynchronize(s.copied));
  if (s.pinned_bytes < ib + lb) {
    if (s.pinned) HT_CUDA_CHECK(cudaFreeHost(s.pinned));
    s.pinned = nullptr;
    HT_CUDA_CHECK(cudaHostAlloc(&s.pinned, ib + lb, cudaHostAllocDefault));
    s.pinned_bytes = ib + lb;
  }
  std::memcpy(s.pinned, images.raw(), ib);
  std::memcpy(static_cast<char*>(s.pinned) + ib, labels.raw(), lb);
  s.images.ensure(images.shape(), images.dtype(), Device::cuda);
  s.labels.ensure(labels.shape(), labels.dtype(), Device::cuda);
  // The copy stream waits for everything issued on the compute stream so far. That covers two
  // hazards: (1) the slot's device buffers may still be read by the compute work of the batch they
  // held before (issued by the previous train_step: in steady state the compute stream then holds
  // exactly the step before the one about to run, so the copy still overlaps that step); (2) ensure()
  // may just have (re)allocated them with cudaMallocAsync on the compute stream, whose pool may hand
  // out a block freed there by work that has not yet run: using it on another stream needs this
  // ordering. It also keeps reset() safe when a slot still in use is staged again.
  HT_CUDA_CHECK(cudaEventRecord(s.compute_done, c.compute));
  HT_CUDA_CHECK(cudaStreamWaitEvent(c.copy, s.compute_done, 0));
  HT_CUDA_CHECK(cudaMemcpyAsync(s.images.raw(), s.pinned, ib, cudaMemcpyHostToDevice, c.copy));
  HT_CUDA_CHECK(cudaMemcpyAsync(s.labels.raw(), static_cast<char*>(s.pinned) + ib, lb, cudaMemcpyHostToDevice, c.copy));
  HT_CUDA_CHECK(cudaEventRecord(s.copied, c.copy));
  next_ = 1 - next_;
  ++staged_;
}

void H2DFeeder::take(Tensor& images, Tensor& labels) {
  if (staged_ == 0) throw RuntimeError("H2DFeeder::take: no batch staged");
  Context& c = ctx();
  const int k = staged_ == 2 ? next_ : 1 - next_;  // the oldest staged slot
  Slot& s = *slots_[k];
  HT_CUDA_CHECK(cudaStreamWaitEvent(c.compute, s.copied, 0));
  images = s.images;
  labels = s.labels;
  --staged_;
}

}  // namespace ht::cuda
#else
namespace ht::cuda {
// CPU-only build: the trainer never creates a feeder (no CUDA device), but the type must be complete.
struct H2DFeeder::Slot {};
H2DFeeder::H2DFeeder() { throw RuntimeError("H2DFeeder: this hpctrain was built without CUDA"); }
H2DFeeder::~H2DFeeder() = default;
void H2DFeeder::stage(const Tensor&, const Tensor&) { throw RuntimeError("H2DFeeder: built without CUDA"); }
void H2DFeeder::take(Tensor&, Tensor&) { throw RuntimeError("H2DFeeder: built without CUDA"); }
}  // namespace ht::cuda
#endif
