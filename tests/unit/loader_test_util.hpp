#pragma once
// Loader options of the augmentation tests: a training loader of global batch 8 with the random
// resized crop to `crop` x `crop` and the flip, in `layout`, on `threads` threads.
#include "io/dataset/dataset.hpp"

namespace ht::test {

inline LoaderOptions resized_crop_options(uint64_t seed, int crop, Layout layout, int threads) {
  LoaderOptions o;
  o.global_batch = 8;
  o.seed = seed;
  o.crop_size = crop;
  o.resized_crop = true;
  o.flip = true;
  o.layout = layout;
  o.threads = threads;
  return o;
}

}  // namespace ht::test
