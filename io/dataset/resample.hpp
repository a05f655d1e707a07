#pragma once
// Image resampling as Pillow does it (libImaging/Resample.c, the BILINEAR filter), so that hpctrain's
// stored and augmented pixels equal those of torchvision's transforms on PIL images: Resize,
// CenterCrop (image_decode.hpp) and RandomResizedCrop (the DataLoader). CPU only.
#include <cstdint>

namespace ht {

/// Resizes the in_w x in_h image at `src` (HWC uint8, C channels, rows `src_stride` pixels apart) to
/// out_w x out_h with PIL's antialiased bilinear filter (a triangle of support 1, widened by the scale
/// when shrinking; weights in 22-bit fixed point; horizontal pass then vertical, each skipped when that
/// side keeps its size), and writes only the window of `cols` x `rows` output pixels starting at
/// (x0, y0) to `dst` (HWC, rows `cols` pixels apart). Bitwise PIL's `resize((out_w, out_h),
/// BILINEAR)` followed by a crop of that window. The window must lie inside out_w x out_h.
void resample_bilinear(const uint8_t* src, int src_stride, int in_w, int in_h, int C, int out_w, int out_h, int x0,
                       int y0, int cols, int rows, uint8_t* dst);

}  // namespace ht
