#include "mpi/bucketer.hpp"

#include <algorithm>
#include <chrono>
#include <string>

#include <mpi.h>

#include "base/hash.hpp"

#include "mpi/dist.hpp"

namespace ht {

namespace {
double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

std::vector<BucketPlan> plan_buckets(const std::vector<ParamSlice>& params, double bucket_mb, int wire_bytes) {
  if (!(bucket_mb > 0))
    throw UsageError("dist.bucket_mb: must be a positive size in MiB, got " + std::to_string(bucket_mb));
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& p = params[i];
    if (p.offset < 0 || p.count < 0 || (i > 0 && p.offset < params[i - 1].offset + params[i - 1].count))
      throw RuntimeError("plan_buckets: parameter " + std::to_string(i) + " slice [" + std::to_string(p.offset) +
                         ", +" + std::to_string(p.count) +
                         ") is negative or overlaps/precedes the previous one (slices must be in increasing offset order)");
  }
  if (wire_bytes != 2 && wire_bytes != 4)
    throw RuntimeError("plan_buckets: wire_bytes = " + std::to_string(wire_bytes) + " (2 or 4)");
  const int64_t cap = std::max<int64_t>(1, static_cast<int64_t>(bucket_mb * 1024.0 * 1024.0 / wire_bytes));
  std::vector<BucketPlan> plan;
  BucketPlan cur;
  bool open = false;
  for (int i = static_cast<int>(params.size()) - 1; i >= 0; --i) {
    const auto& p = params[static_cast<size_t>(i)];
    if (open) {
      // Adding parameter i extends the bucket down to p.offset (gaps included).
      if (cur.end - p.offset > cap) {
        plan.push_back(cur);
        open = false;
      }
    }
    if (!open) {
      cur = BucketPlan{i, i, p.offset, p.offset + p.count};
      open = true;
    } else {
      cur.first_param = i;
      cur.begin = p.offset;
    }
  }
  if (open) plan.push_back(cur);
  return plan;
}

GradBucketer::GradBucketer(Communicator& comm, std::span<float> flat_grads, std::vector<ParamSlice> params,
                           double bucket_mb, WireDType wire)
    : comm_(comm), flat_(flat_grads), params_(std::move(params)), wire_(wire) {
  plan_ = plan_buckets(params_, bucket_mb, wire_bytes(wire));
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].offset + params_[i].count > static_cast<int64_t>(flat_.size()))
      throw RuntimeError("GradBucketer: parameter " + std::to_string(i) + " slice ends at " +
                         std::to_string(params_[i].offset + params_[i].count) + ", beyond the flat gradient buffer of " +
                         std::to_string(flat_.size()) + " floats");
  bucket_of_param_.assign(params_.size(), -1);
  for (size_t b = 0; b < plan_.size(); ++b) {
    for (int i = plan_[b].first_param; i <= plan_[b].last_param; ++i) bucket_of_param_[static_cast<size_t>(i)] = static_cast<int>(b);
    stats_.bytes_per_step += (plan_[b].end - plan_[b].begin) * static_cast<int64_t>(wire_bytes(wire));
  }
  remaining_.assign(plan_.size(), 0);
  marked_.assign(params_.size(), 0);
  communicate_ = comm_.world_size() > 1;
  if (communicate_) comm_.set_wire_dtype(wire);
  if (communicate_) check_same_plan_on_all_ranks();
}

void GradBucketer::check_same_plan_on_all_ranks() const {
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) return;  // a stand-in communicator in a single-process test
  // FNV-1a over the bucket boundaries, kept below 2^62 so its negation fits.
  Fnv1a h;
  h.update_int(static_cast<int64_t>(flat_.size()));
  for (const auto& b : plan_) {
    h.update_int(b.begin);
    h.update_int(b.end);
  }
  const long long mine = static_cast<long long>(h.value() >> 2);
  const long long hi = dist_max(mine), lo = -dist_max(-mine);
  if (hi != lo)
    throw RuntimeError("GradBucketer: rank " + std::to_string(comm_.rank()) +
                       ": the gradient buckets differ between ranks (this rank: " + std::to_string(plan_.size()) +
                       " buckets over " + std::to_string(flat_.size()) +
                       " floats); every rank needs the same model and dist.bucket_mb");
}

std::vector<std::pair<int64_t, int64_t>> GradBucketer::bucket_ranges() const {
  std::vector<std::pair<int64_t, int64_t>> r;
  for (const auto& b : plan_) r.emplace_back(b.begin, b.end);
  return r;
}

void GradBucketer::begin_step() {
  if (in_step_)
    throw RuntimeError("GradBucketer::begin_step: the previous step's buckets were started but finish() was not called");
  for (size_t b = 0; b < plan_.size(); ++b) remaining_[b] = plan_[b].last_param - plan_[b].first_param + 1;
  std::fill(marked_.begin(), marked_.end(), 0);
  next_launch_ = 0;
  in_step_ = true;
  t_begin_ = now_ms();
  t_first_launch_ = -1;
  stats_.launch_ms.assign(plan_.size(), -1.0);
  stats_.buckets_launched_early = 0;
}

void GradBucketer::mark_ready(int i) {
  if (!in_step_) return;
  if (i < 0 || i >= static_cast<int>(params_.size()))
    throw RuntimeError("GradBucketer::mark_ready: parameter index " + std::to_string(i) + " outside [0, " +
                       std::to_string(params_.size()) + ")");
  if (marked_[static_cast<size_t>(i)])
    throw RuntimeError("GradBucketer::mark_ready: parameter " + std::to_string(i) + " marked twice in one step");
  marked_[static_cast<size_t>(i)] = 1;
  int b = bucket_of_param_[static_cast<size_t>(i)];
  if (--remaining_[static_cast<size_t>(b)] == 0 && b == next_launch_) {
    launch_ready();
    stats_.buckets_launched_early = next_launch_;
  }
}

void GradBucketer::launch_ready() {
  // Launch complete buckets in index order only (same collective sequence on every rank).
  while (next_launch_ < num_buckets() && remaining_[static_cast<size_t>(next_launch_)] == 0) launch(next_launch_++);
}

void GradBucketer::launch(int b) {
  const double t = now_ms();
  if (t_first_launch_ < 0) t_first_launch_ = t;
  stats_.launch_ms[static_cast<size_t>(b)] = t - t_begin_;
  if (!communicate_) return;  // world_size 1: the average is the gradient itself
  const auto& p = plan_[static_cast<size_t>(b)];
  comm_.start_allreduce_average(flat_.subspan(static_cast<size_t>(p.begin), static_cast<size_t>(p.end - p.begin)));
}

double GradBucketer::finish() {
  if (!in_step_) begin_step();
  while (next_launch_ < num_buckets()) launch(next_launch_++);
  in_step_ = false;
  double waited = communicate_ ? comm_.wait_all() : 0.0;
  const double t1 = now_ms();
  stats_.last_step_wait_ms = communicate_ ? waited : 0.0;
  stats_.last_step_allreduce_ms = (communicate_ && t_first_launch_ >= 0) ? t1 - t_first_launch_ : 0.0;
  return stats_.last_step_wait_ms;
}

}  // namespace ht
