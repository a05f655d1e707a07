#pragma once
// Counter-based randomness and per-sample augmentation, written once for both devices (HT_HD).
// Every random decision is a pure function of (seed, stream, epoch, global sample index), so the
// augmentation a sample gets does not depend on world_size, rank, batch position or thread
// (docs/dataset.md "What every rank reads"). The generator is SplitMix64's finaliser (Steele, Lea,
// Flood: "Fast splittable pseudorandom number generators", OOPSLA 2014) chained over the key words.
//
// Crop: the image is conceptually zero-padded by `pad` pixels on every side and an H x W window is
// taken at offset (oy, ox) in [0, 2*pad]^2: out(y, x) = in(y + oy - pad, x + ox - pad), 0 outside.
// Flip (p = 0.5): out(y, x) = cropped(y, W-1-x). Both act on uint8 NHWC before normalisation.
#include <cstdint>

#include "base/hd.hpp"

namespace ht {

/// Stream tags keep the permutation and the augmentation draws independent.
constexpr uint64_t kStreamPermutation = 0x5045524d55544531ull;  // "PERMUTE1"
constexpr uint64_t kStreamAugment = 0x4155474d454e5431ull;      // "AUGMENT1"
constexpr uint64_t kStreamSynthetic = 0x53594e5448455431ull;    // "SYNTHET1"

/// SplitMix64 finaliser: a bijective 64-bit mix.
HT_HD uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// Hash of a key of up to four words (chained SplitMix64).
HT_HD uint64_t hash_key(uint64_t a, uint64_t b, uint64_t c = 0, uint64_t d = 0) {
  uint64_t h = splitmix64(a);
  h = splitmix64(h ^ b);
  h = splitmix64(h ^ c);
  return splitmix64(h ^ d);
}

/// Uniform integer in [0, bound) from 64 random bits (multiply-high; bias < bound / 2^64).
HT_HD uint64_t uniform_below(uint64_t bits, uint64_t bound) {
#if defined(__CUDA_ARCH__)
  return __umul64hi(bits, bound);
#else
  return static_cast<uint64_t>((static_cast<unsigned __int128>(bits) * bound) >> 64);
#endif
}

/// One sample's augmentation decision.
struct AugParams {
  int oy = 0, ox = 0;  ///< crop window offset in the padded image, each in [0, 2*pad]
  bool flip = false;
};

/// The decision for global sample `index` in `epoch`: offsets uniform in [0, 2*pad] (pad = 0 gives
/// oy = ox = 0, i.e. no crop), flip with probability 0.5 when `flip_enabled`.
HT_HD AugParams aug_params(uint64_t seed, int epoch, int64_t index, int pad, bool flip_enabled) {
  uint64_t r = hash_key(seed, kStreamAugment, static_cast<uint64_t>(static_cast<int64_t>(epoch)),
                        static_cast<uint64_t>(index));
  AugParams p;
  uint64_t span = static_cast<uint64_t>(2 * pad + 1);
  p.oy = static_cast<int>(uniform_below(splitmix64(r ^ 1u), span));
  p.ox = static_cast<int>(uniform_below(splitmix64(r ^ 2u), span));
  p.flip = flip_enabled && (splitmix64(r ^ 3u) >> 63) != 0;
  return p;
}

/// Output pixel (y, x, c) of the augmented image, from a uint8 NHWC image `src` of H x W x C.
HT_HD uint8_t aug_pixel(const uint8_t* src, int H, int W, int C, int y, int x, int c, AugParams p, int pad) {
  int xs = p.flip ? (W - 1 - x) : x;
  int sy = y + p.oy - pad;
  int sx = xs + p.ox - pad;
  if (sy < 0 || sy >= H || sx < 0 || sx >= W) return 0;
  return src[(static_cast<int64_t>(sy) * W + sx) * C + c];
}

/// Normalised value of a uint8 pixel: (v/255 - mean) / std.
HT_HD float normalize_pixel(uint8_t v, float mean, float inv_std) {
  return (static_cast<float>(v) * (1.0f / 255.0f) - mean) * inv_std;
}

/// Applies crop and flip to one H x W x C uint8 image (dst and src must not overlap).
HT_HD void augment_image(const uint8_t* src, uint8_t* dst, int H, int W, int C, AugParams p, int pad) {
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x)
      for (int c = 0; c < C; ++c) dst[(static_cast<int64_t>(y) * W + x) * C + c] = aug_pixel(src, H, W, C, y, x, c, p, pad);
}

}  // namespace ht
