// Epoch permutation and the per-rank slices of the docs/dataset.md sampling rule.
#include "io/dataset/sampler.hpp"

#include <numeric>

#include "io/dataset/augment.hpp"
#include "io/dataset/dataset.hpp"

namespace ht {

std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int epoch) {
  std::vector<int64_t> p(static_cast<size_t>(n < 0 ? 0 : n));
  std::iota(p.begin(), p.end(), int64_t{0});
  // Fisher-Yates from the back; swap partner of position i drawn from hash(seed, epoch, i).
  uint64_t key = hash_key(seed, kStreamPermutation, static_cast<uint64_t>(static_cast<int64_t>(epoch)));
  for (int64_t i = n - 1; i > 0; --i) {
    uint64_t j = uniform_below(splitmix64(key ^ static_cast<uint64_t>(i)), static_cast<uint64_t>(i + 1));
    std::swap(p[static_cast<size_t>(i)], p[static_cast<size_t>(j)]);
  }
  return p;
}

std::pair<int64_t, int64_t> train_positions(int64_t step, int64_t global_batch, int rank, int world_size) {
  int64_t b = global_batch / world_size;
  int64_t begin = step * global_batch + rank * b;
  return {begin, begin + b};
}

std::pair<int64_t, int64_t> eval_range(int64_t n, int rank, int world_size) {
  return {n * rank / world_size, n * (rank + 1) / world_size};
}

}  // namespace ht
