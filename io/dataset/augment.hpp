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
#include <cmath>
#include <cstdint>

#include "base/hd.hpp"

namespace ht {

/// Stream tags keep the permutation and the augmentation draws independent.
constexpr uint64_t kStreamPermutation = 0x5045524d55544531ull;  // "PERMUTE1"
constexpr uint64_t kStreamAugment = 0x4155474d454e5431ull;      // "AUGMENT1"
constexpr uint64_t kStreamSynthetic = 0x53594e5448455431ull;    // "SYNTHET1"
constexpr uint64_t kStreamResizedCrop = 0x5252435230303031ull;  // "RRCR0001"

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

/// A crop window: rows [y, y + h), columns [x, x + w).
struct CropBox {
  int y = 0, x = 0, h = 0, w = 0;
};

/// Uniform double in [0, 1) from 64 random bits (the top 53).
inline double uniform01(uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }

/// torchvision's RandomResizedCrop.get_params (0.14) for global sample `index` in `epoch` of an H x W
/// image, its draws counter-based: up to 10 tries of an area fraction uniform in [scale_min,
/// scale_max] and an aspect ratio log-uniform in [ratio_min, ratio_max], w = round(sqrt(area *
/// ratio)), h = round(sqrt(area / ratio)) (ties to even, as Python's round), accepted when 0 < w <= W
/// and 0 < h <= H, at a uniform position; otherwise the centre crop clamped to the ratio range.
inline CropBox resized_crop_box(uint64_t seed, int epoch, int64_t index, int H, int W, double scale_min,
                                double scale_max = 1.0, double ratio_min = 3.0 / 4.0, double ratio_max = 4.0 / 3.0) {
  const uint64_t r = hash_key(seed, kStreamResizedCrop, static_cast<uint64_t>(static_cast<int64_t>(epoch)),
                              static_cast<uint64_t>(index));
  const double area = static_cast<double>(H) * W;
  const double log_lo = std::log(ratio_min), log_hi = std::log(ratio_max);
  for (uint64_t t = 0; t < 10; ++t) {
    const double target = area * (scale_min + (scale_max - scale_min) * uniform01(splitmix64(r ^ (4 * t + 1))));
    const double ratio = std::exp(log_lo + (log_hi - log_lo) * uniform01(splitmix64(r ^ (4 * t + 2))));
    const int w = static_cast<int>(std::nearbyint(std::sqrt(target * ratio)));
    const int h = static_cast<int>(std::nearbyint(std::sqrt(target / ratio)));
    if (0 < w && w <= W && 0 < h && h <= H) {
      CropBox b;
      b.h = h;
      b.w = w;
      b.y = static_cast<int>(uniform_below(splitmix64(r ^ (4 * t + 3)), static_cast<uint64_t>(H - h + 1)));
      b.x = static_cast<int>(uniform_below(splitmix64(r ^ (4 * t + 4)), static_cast<uint64_t>(W - w + 1)));
      return b;
    }
  }
  CropBox b;
  const double in_ratio = static_cast<double>(W) / H;
  if (in_ratio < ratio_min) {
    b.w = W;
    b.h = static_cast<int>(std::nearbyint(W / ratio_min));
  } else if (in_ratio > ratio_max) {
    b.h = H;
    b.w = static_cast<int>(std::nearbyint(H * ratio_max));
  } else {
    b.w = W;
    b.h = H;
  }
  b.y = (H - b.h) / 2;
  b.x = (W - b.w) / 2;
  return b;
}

/// The centre crop_h x crop_w window of an H x W image, as torchvision's CenterCrop: offsets
/// round((H - crop_h) / 2) and round((W - crop_w) / 2), ties to even.
inline CropBox center_crop_box(int H, int W, int crop_h, int crop_w) {
  CropBox b;
  b.h = crop_h;
  b.w = crop_w;
  b.y = static_cast<int>(std::nearbyint((H - crop_h) / 2.0));
  b.x = static_cast<int>(std::nearbyint((W - crop_w) / 2.0));
  return b;
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
