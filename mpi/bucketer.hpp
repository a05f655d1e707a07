#pragma once
// Gradient buckets: the piece of data parallelism the trainer calls during backward.
//
// Every parameter's gradient lives in one flat float buffer, in registration (forward) order.
// Backward produces the last layers' gradients first, so buckets are planned in REVERSE registration
// order: bucket 0 holds the last parameters. Each bucket is one contiguous range of the flat buffer
// of about bucket_mb MiB (parameters are added while the bucket stays within the cap; a parameter
// larger than the cap gets a bucket of its own). As soon as every parameter of a bucket is marked
// ready, its average over ranks is started (Communicator::start_allreduce_average) and overlaps with
// the rest of backward, as in PyTorch DDP (Li et al., "PyTorch Distributed", VLDB 2020).
//
// Launch order: buckets are launched strictly in bucket index order. A bucket that becomes complete
// before an earlier one waits until the earlier one launches, so all ranks start the same sequence of
// collectives whatever order their parameters are marked in (a mismatch would deadlock or mix data).
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "mpi/communicator.hpp"

namespace ht {

/// A parameter's gradient range in the flat gradient buffer, in floats.
struct ParamSlice {
  int64_t offset;
  int64_t count;
};

/// One planned bucket: parameters [first_param, last_param] (registration indices) and the range
/// [begin, end) of the flat buffer (floats) that covers them.
struct BucketPlan {
  int first_param = 0, last_param = -1;
  int64_t begin = 0, end = 0;
};

/// Plans buckets in reverse registration order (see above), each of about bucket_mb MiB on the wire
/// (`wire_bytes` per element: 4 for fp32, 2 for bf16, so a bf16 bucket holds twice the parameters).
/// `params` must be in increasing, non-overlapping offset order; a bucket's range runs from its first parameter's offset to its last
/// parameter's end, so gaps between parameters (alignment padding) are covered too. Throws UsageError
/// when bucket_mb is not positive (names dist.bucket_mb) and RuntimeError on unordered slices.
std::vector<BucketPlan> plan_buckets(const std::vector<ParamSlice>& params, double bucket_mb, int wire_bytes = 4);

class GradBucketer {
 public:
  /// flat_grads: every parameter's gradient, contiguous, in registration order, on comm's device.
  /// Collective when world_size > 1: all ranks construct it together and check (two small MPI
  /// allreduces on MPI_COMM_WORLD) that they planned identical buckets, since different plans would
  /// deadlock or mix unrelated gradients. Throws as plan_buckets does, and RuntimeError when a slice
  /// lies outside flat_grads or the plans differ between ranks (on every rank). `wire` is
  /// dist.grad_dtype: set on `comm` (UsageError when it cannot send it) and used for bucket sizes.
  GradBucketer(Communicator& comm, std::span<float> flat_grads, std::vector<ParamSlice> params, double bucket_mb,
               WireDType wire = WireDType::f32);

  /// Call before the backward pass whose gradients are final (with accumulation: the last
  /// micro-batch). Throws RuntimeError if the previous step was not finished.
  void begin_step();
  /// That parameter's gradient is final: starts its bucket (and any complete buckets held back behind
  /// it) when the bucket is complete. Outside begin_step()..finish() it does nothing, so accumulation
  /// micro-batches may call it unconditionally. Throws RuntimeError on an index out of range or a
  /// parameter marked twice in one step.
  void mark_ready(int param_index);
  /// Starts every bucket not yet started (in order), waits for all; flat_grads then holds the average
  /// over ranks. Returns the milliseconds blocked. Without begin_step it averages the whole buffer.
  double finish();

  /// Loss scaling: the averages of the coming step also divide by `scale` (before begin_step).
  /// True when the communicator does it (fused with the average); false: the caller divides.
  bool set_unscale(float scale) { return communicate_ && comm_.set_average_unscale(scale); }

  int num_buckets() const { return static_cast<int>(plan_.size()); }
  /// [begin, end) of each bucket in floats, in launch order.
  std::vector<std::pair<int64_t, int64_t>> bucket_ranges() const;
  const std::vector<BucketPlan>& plan() const { return plan_; }

  struct Stats {
    double last_step_allreduce_ms = 0;  ///< first bucket launch until finish() returned
    double last_step_wait_ms = 0;       ///< time finish() blocked (communication not hidden)
    int64_t bytes_per_step = 0;         ///< bytes averaged per step (all buckets), in the wire type
    int buckets_launched_early = 0;     ///< buckets started during backward, before finish()
    std::vector<double> launch_ms;      ///< each bucket's launch time since begin_step (timeline)
  };
  const Stats& stats() const { return stats_; }

 private:
  void check_same_plan_on_all_ranks() const;
  void launch_ready();
  void launch(int b);

  Communicator& comm_;
  std::span<float> flat_;
  std::vector<ParamSlice> params_;
  std::vector<BucketPlan> plan_;
  std::vector<int> bucket_of_param_;
  std::vector<int> remaining_;     ///< unmarked parameters per bucket this step
  std::vector<uint8_t> marked_;    ///< per parameter, this step
  int next_launch_ = 0;            ///< buckets [0, next_launch_) are started this step
  bool in_step_ = false;
  bool communicate_ = true;        ///< false with world_size 1
  WireDType wire_ = WireDType::f32;
  double t_begin_ = 0, t_first_launch_ = -1;
  Stats stats_;
};

}  // namespace ht
