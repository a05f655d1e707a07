#pragma once
// The sampling rule of docs/dataset.md as plain functions of (n, seed, epoch, step, rank, world_size), so the
// loader, tests and any future GPU-side loader agree on which sample goes where.
#include <cstdint>
#include <utility>
#include <vector>

namespace ht {

/// Positions [begin, end) of the epoch permutation that rank `rank` takes at global step `step`:
/// [s*B + r*B/W, s*B + (r+1)*B/W). Requires W | B.
std::pair<int64_t, int64_t> train_positions(int64_t step, int64_t global_batch, int rank, int world_size);

/// Samples [begin, end) that rank `rank` evaluates: [floor(r*n/W), floor((r+1)*n/W)).
std::pair<int64_t, int64_t> eval_range(int64_t n, int rank, int world_size);

}  // namespace ht
