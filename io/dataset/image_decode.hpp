#pragma once
// Decoding one image file's bytes (JPEG through libjpeg-turbo's TurboJPEG API, PNG through libpng) to
// 8-bit pixels, and the shorter-side resize plus centre crop of `hpctrain prepare --format
// imagefolder` (PIL's resampling, written here: docs/dataset.md "Your own images" says why). Every size a file declares is
// checked against ImageLimits before anything is allocated by it. A file that cannot be decoded is
// not an exception here: the converter skips it and lists it, so the functions return a reason.
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "io/dataset/augment.hpp"

namespace ht {

/// What a file's first bytes say it is (the extension is not trusted).
enum class ImageKind { jpeg, png, other };
ImageKind sniff_image(std::span<const uint8_t> bytes);

struct ImageLimits {
  /// Declared width * height above this is refused before decoding. PIL warns at 89.5 million pixels
  /// and refuses at twice that; the largest ImageNet photo has about 12 million.
  int64_t max_pixels = 100'000'000;
  int max_side = 65'535;  ///< JPEG's own limit
};

/// An 8-bit image, rows top to bottom, HWC (channels 1 = gray or 3 = RGB).
struct Image8 {
  int width = 0, height = 0, channels = 0;
  std::vector<uint8_t> pixels;
};

/// Decodes JPEG (baseline, progressive; gray, YCbCr, CMYK/YCCK) or PNG (1-16 bits, gray, RGB, palette,
/// with or without alpha) to `channels` (1 or 3) channels, as PIL's `Image.open(f).convert("RGB")` (or
/// "L") would: alpha and palette transparency dropped, 16-bit samples reduced to their high byte,
/// 4-channel JPEG as Adobe's inverted CMYK with PIL's CMYK-to-RGB arithmetic, RGB to gray as PIL's
/// L24 luma. JPEG warnings (a truncated file, corrupt data) count as errors. `min_side` > 0 lets JPEG
/// decode at the largest DCT scale 1/d (d = 2, 4, 8) that keeps both sides >= 2 * min_side, as PIL's
/// `Image.draft("RGB", (2 * min_side, 2 * min_side))`: several times faster on large photos. Returns false with `reason` set (one line, no path) for anything it cannot decode.
bool decode_image(std::span<const uint8_t> bytes, int channels, const ImageLimits& limits, int min_side, Image8& out,
                  std::string& reason);

/// The width and height a JPEG or PNG file declares, from its header alone (nothing is decoded or
/// allocated by them). False with `reason` set for anything else, or a size over `limits`.
bool image_size(std::span<const uint8_t> bytes, const ImageLimits& limits, int& width, int& height, std::string& reason);

/// The window `box` (rows box.y .. box.y + box.h - 1, columns box.x .. box.x + box.w - 1 of the full
/// image) of a JPEG or PNG file, decoded to `channels` channels with decode_image's conversions, into
/// `out`, with `window` set to where it lies in `out` (out may hold a few more rows and columns around
/// it). Only that part is decoded where libjpeg-turbo allows it (RGB output of a gray, YCbCr or RGB
/// JPEG: rows above it skipped without the inverse DCT, rows below not read, columns cropped to block
/// boundaries; jpeg_skip_scanlines and jpeg_crop_scanline), and at the largest DCT scale 1/d (d = 8,
/// 4, 2) that keeps the window at least min_w x min_h; the window is then that of the 1/d-scaled
/// image, columns floor(box.x / d) .. ceil((box.x + box.w) / d) - 1 (rows alike, clipped to the scaled
/// image). With d = 1 (and for PNG and CMYK JPEG, decoded whole) the window's pixels are exactly
/// decode_image's. Throws std::invalid_argument for a box outside the image; returns false with
/// `reason` for a file it cannot decode.
bool decode_image_window(std::span<const uint8_t> bytes, int channels, const ImageLimits& limits, const CropBox& box,
                         int min_w, int min_h, Image8& out, CropBox& window, std::string& reason);

/// The same with the window chosen from the image's size, `pick(height, width)`, called once when the
/// header has been read (so the header is parsed once; a file whose header does not read fails
/// before `pick` is called).
bool decode_image_window(std::span<const uint8_t> bytes, int channels, const ImageLimits& limits,
                         const std::function<CropBox(int height, int width)>& pick, int min_w, int min_h, Image8& out,
                         CropBox& window, std::string& reason);

/// The resize of torchvision's `Resize(size)` (shorter side to `size`, the longer to
/// int(size * long / short), bilinear with antialiasing: a triangle filter widened by the scale when
/// shrinking) followed by `CenterCrop(size)` (offset int(round((long' - size) / 2))). Output size x size
/// x channels, HWC. The arithmetic is Pillow's (libImaging/Resample.c: coefficients in double, then
/// 22-bit fixed point, horizontal pass then vertical), so the result is PIL's pixel for pixel; only
/// the cropped pixels are computed. Throws std::invalid_argument for size < 1 or an empty image.
Image8 resize_shorter_center_crop(const Image8& in, int size);

/// The image scaled (PIL's bilinear) so that its longer side is max_side (the shorter one
/// round(short * max_side / long), at least 1); unchanged when it already fits.
Image8 fit_longer_side(const Image8& in, int max_side);

/// JPEG bytes of `img` (1 or 3 channels) at `quality` (4:2:0 for RGB) through TurboJPEG. Throws
/// std::runtime_error with TurboJPEG's reason on failure.
std::vector<uint8_t> encode_jpeg(const Image8& img, int quality);

}  // namespace ht
