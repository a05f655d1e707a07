#pragma once
// Host-to-device input pipeline (GPU runs): each batch is staged into pinned host memory and copied
// on the context's copy stream, one batch ahead of the compute that uses it; the compute stream
// waits on the copy's event (cudaStreamWaitEvent), so copy and compute overlap. Two slots: the
// batch being computed and the next one. Each copy is ordered after the compute work issued before
// stage() (which is the previous step's), so a slot's device buffers are never overwritten while
// a step still reads them.
// CUDA builds only (HT_HAVE_CUDA); the trainer uses it when train.device = cuda.
#include <memory>

#include "base/tensor.hpp"

namespace ht::cuda {

class H2DFeeder {
 public:
  H2DFeeder();
  ~H2DFeeder();
  H2DFeeder(const H2DFeeder&) = delete;
  H2DFeeder& operator=(const H2DFeeder&) = delete;
  /// Copies host images (f32, any shape) and labels (i32 [n]) into the next slot's pinned buffers
  /// and starts their asynchronous copy to the device. Throws RuntimeError on a CUDA error.
  void stage(const Tensor& images, const Tensor& labels);
  /// The oldest staged batch as device tensors; work issued afterwards on the compute stream runs
  /// after its copy. Valid until that slot is staged again (two stage() calls later). Throws
  /// RuntimeError when nothing is staged.
  void take(Tensor& images, Tensor& labels);
  /// Forgets staged batches not taken (e.g. at the end of an epoch cut short).
  void reset() { staged_ = 0; }

 private:
  struct Slot;
  std::unique_ptr<Slot> slots_[2];
  int staged_ = 0;   // slots staged and not yet taken (0..2)
  int next_ = 0;     // slot the next stage() fills
};

}  // namespace ht::cuda
