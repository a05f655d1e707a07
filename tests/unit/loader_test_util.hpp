#pragma once
// Loader options of the augmentation tests: a training loader of global batch 8 with the random
// resized crop to `crop` x `crop` and the flip, in `layout`, on `threads` threads.
#include "io/dataset/dataset.hpp"

namespace ht::test {

inline LoaderOptions resized_crop_options(uint64_t seed, int crop, Layout layout, int threads) {
  return {.global_batch = 8, .seed = seed, .flip = true, .crop_size = crop, .resized_crop = true, .threads = threads,
          .layout = layout};
}

}  // namespace ht::test
