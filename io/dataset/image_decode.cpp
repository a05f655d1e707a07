// JPEG (TurboJPEG API), PNG (libpng) and the resize + centre crop (io/dataset/resample.hpp). See image_decode.hpp.
#include "io/dataset/image_decode.hpp"

#include "io/dataset/resample.hpp"

#include <png.h>
#include <turbojpeg.h>

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace ht {

ImageKind sniff_image(std::span<const uint8_t> b) {
  if (b.size() >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF) return ImageKind::jpeg;
  static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (b.size() >= 8 && std::memcmp(b.data(), png_sig, 8) == 0) return ImageKind::png;
  return ImageKind::other;
}

namespace {

bool too_large(int64_t w, int64_t h, const ImageLimits& lim, std::string& reason) {
  if (w < 1 || h < 1) {
    reason = "declares a size of " + std::to_string(w) + " x " + std::to_string(h);
    return true;
  }
  if (w > lim.max_side || h > lim.max_side || w * h > lim.max_pixels) {
    reason = "declares " + std::to_string(w) + " x " + std::to_string(h) + " pixels, over the limit of " +
             std::to_string(lim.max_pixels) + " pixels (" + std::to_string(lim.max_side) + " per side)";
    return true;
  }
  return false;
}

// Gray to RGB by copying, RGB to gray as PIL's "L" (ITU-R 601-2 luma in 16-bit fixed point, L24).
void to_channels(Image8& img, int channels) {
  if (img.channels == channels) return;
  const size_t n = static_cast<size_t>(img.width) * img.height;
  std::vector<uint8_t> out(n * channels);
  for (size_t i = 0; i < n; ++i) {
    if (channels == 3) {
      out[i * 3] = out[i * 3 + 1] = out[i * 3 + 2] = img.pixels[i];
    } else {
      const uint8_t* p = &img.pixels[i * 3];
      out[i] = static_cast<uint8_t>((p[0] * 19595u + p[1] * 38470u + p[2] * 7471u + 0x8000u) >> 16);
    }
  }
  img.pixels = std::move(out);
  img.channels = channels;
}

bool decode_jpeg(std::span<const uint8_t> bytes, int channels, const ImageLimits& lim, int min_side, Image8& out,
                 std::string& reason) {
  tjhandle h = tjInitDecompress();
  if (!h) {
    reason = "cannot start the JPEG decoder";
    return false;
  }
  struct Closer {
    tjhandle h;
    ~Closer() { tjDestroy(h); }
  } closer{h};
  auto* src = const_cast<unsigned char*>(bytes.data());
  auto size = static_cast<unsigned long>(bytes.size());
  int w = 0, hgt = 0, subsamp = 0, cs = 0;
  if (tjDecompressHeader3(h, src, size, &w, &hgt, &subsamp, &cs) != 0) {
    reason = std::string("not a readable JPEG: ") + tjGetErrorStr2(h);
    return false;
  }
  if (too_large(w, hgt, lim, reason)) return false;
  // The largest DCT scale 1/d (d = 8, 4, 2) with both sides still >= 2 * min_side after it: PIL's
  // Image.draft(mode, (2 * min_side, 2 * min_side)) rule. libjpeg-turbo then decodes for a fraction of
  // the full cost.
  tjscalingfactor sf{1, 1};
  if (min_side > 0) {
    for (int denom : {8, 4, 2}) {
      if (w >= 2 * min_side * denom && hgt >= 2 * min_side * denom) {
        sf = tjscalingfactor{1, denom};
        break;
      }
    }
  }
  const int sw = TJSCALED(w, sf), sh = TJSCALED(hgt, sf);
  const bool cmyk = cs == TJCS_CMYK || cs == TJCS_YCCK;
  const int flags = TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS;
  const int pf = cmyk ? TJPF_CMYK : cs == TJCS_GRAY ? TJPF_GRAY : TJPF_RGB;
  const int pf_channels = tjPixelSize[pf];
  std::vector<uint8_t> buf(static_cast<size_t>(sw) * sh * pf_channels);
  if (tjDecompress2(h, src, size, buf.data(), sw, sw * pf_channels, sh, pf, flags) != 0) {
    reason = std::string("JPEG data cannot be decoded: ") + tjGetErrorStr2(h);
    return false;
  }
  out.width = sw;
  out.height = sh;
  out.channels = pf == TJPF_GRAY ? 1 : 3;
  if (!cmyk) {
    out.pixels = std::move(buf);
  } else {
    // PIL reads 4-channel JPEGs as Adobe's inverted CMYK (rawmode "CMYK;I": value = 255 - stored) and
    // converts to RGB as R = (255 - K) - C(255 - K)/255 with its rounding (MULDIV255).
    const size_t n = static_cast<size_t>(sw) * sh;
    out.pixels.resize(n * 3);
    for (size_t i = 0; i < n; ++i) {
      const uint8_t* p = &buf[i * 4];
      const int nk = p[3];  // 255 - K, K = 255 - stored
      for (int c = 0; c < 3; ++c) {
        const int tmp = (255 - p[c]) * nk + 128;
        out.pixels[i * 3 + c] = static_cast<uint8_t>(std::clamp(nk - (((tmp >> 8) + tmp) >> 8), 0, 255));
      }
    }
  }
  to_channels(out, channels);
  return true;
}

// libpng reports errors by longjmp: the two functions below hold only plain data between setjmp
// and the calls that may jump, and everything with a destructor lives in the caller.
struct PngSource {
  const uint8_t* data;
  size_t size, pos;
  char message[200];
};

void png_read_bytes(png_structp p, png_bytep dst, png_size_t n) {
  auto* s = static_cast<PngSource*>(png_get_io_ptr(p));
  if (n > s->size - s->pos) png_error(p, "file ends early (truncated)");
  std::memcpy(dst, s->data + s->pos, n);
  s->pos += n;
}

void png_on_error(png_structp p, png_const_charp msg) {
  auto* s = static_cast<PngSource*>(png_get_error_ptr(p));
  std::snprintf(s->message, sizeof s->message, "%s", msg);
  png_longjmp(p, 1);
}

void png_on_warning(png_structp, png_const_charp) {}  // PIL ignores them too (e.g. an odd iCCP profile)

// Reads the chunks before the image data; false on a libpng error. Nothing is allocated by the
// declared size yet: the caller checks it first.
bool png_header(png_structp p, png_infop info, png_uint_32* w, png_uint_32* h) {
  if (setjmp(png_jmpbuf(p))) return false;
  // libpng's own size limit off (PNG allows 2^31 - 1): ImageLimits decides, with a clearer reason.
  png_set_user_limits(p, 0x7fffffffu, 0x7fffffffu);
  png_set_chunk_malloc_max(p, 64u << 20);  // a text or ICC chunk bomb ends here
  png_read_info(p, info);
  int depth = 0, color = 0;
  png_get_IHDR(p, info, w, h, &depth, &color, nullptr, nullptr, nullptr);
  return true;
}

// The transforms to 8-bit gray or RGB (libpng allocates its row buffers here).
bool png_transforms(png_structp p, png_infop info) {
  if (setjmp(png_jmpbuf(p))) return false;
  const int depth = png_get_bit_depth(p, info), color = png_get_color_type(p, info);
  if (depth == 16) png_set_strip_16(p);  // the high byte, as PIL
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(p);
  if ((color & PNG_COLOR_MASK_COLOR) == 0 && depth < 8) png_set_expand_gray_1_2_4_to_8(p);
  if (color & PNG_COLOR_MASK_ALPHA) png_set_strip_alpha(p);
  png_set_interlace_handling(p);
  png_read_update_info(p, info);
  return true;
}

bool png_pixels(png_structp p, png_bytep* rows) {
  if (setjmp(png_jmpbuf(p))) return false;
  png_read_image(p, rows);
  return true;
}

bool decode_png(std::span<const uint8_t> bytes, int channels, const ImageLimits& lim, Image8& out, std::string& reason) {
  PngSource src{bytes.data(), bytes.size(), 0, {0}};
  png_structp p = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, png_on_error, png_on_warning);
  png_infop info = p ? png_create_info_struct(p) : nullptr;
  if (!info) {
    png_destroy_read_struct(&p, nullptr, nullptr);
    reason = "cannot start the PNG decoder";
    return false;
  }
  struct Closer {
    png_structp* p;
    png_infop* i;
    ~Closer() { png_destroy_read_struct(p, i, nullptr); }
  } closer{&p, &info};
  png_set_read_fn(p, &src, png_read_bytes);
  png_uint_32 w = 0, h = 0;
  if (!png_header(p, info, &w, &h)) {
    reason = std::string("not a readable PNG: ") + src.message;
    return false;
  }
  if (too_large(w, h, lim, reason)) return false;
  if (!png_transforms(p, info)) {
    reason = std::string("not a readable PNG: ") + src.message;
    return false;
  }
  const int native = png_get_channels(p, info);  // after the transforms: 1 (gray) or 3 (RGB)
  const size_t row_bytes = png_get_rowbytes(p, info);
  if ((native != 1 && native != 3) || row_bytes != static_cast<size_t>(w) * native) {
    reason = "PNG rows of " + std::to_string(row_bytes) + " bytes in " + std::to_string(native) + " channels, expected " +
             std::to_string(size_t{w}) + " 8-bit gray or RGB pixels";
    return false;
  }
  out.width = static_cast<int>(w);
  out.height = static_cast<int>(h);
  out.channels = native;
  out.pixels.assign(row_bytes * h, 0);
  std::vector<png_bytep> rows(h);
  for (png_uint_32 y = 0; y < h; ++y) rows[y] = out.pixels.data() + y * row_bytes;
  if (!png_pixels(p, rows.data())) {
    reason = std::string("PNG data cannot be decoded: ") + src.message;
    return false;
  }
  to_channels(out, channels);
  return true;
}

}  // namespace

bool decode_image(std::span<const uint8_t> bytes, int channels, const ImageLimits& limits, int min_side, Image8& out,
                  std::string& reason) {
  if (channels != 1 && channels != 3) throw std::invalid_argument("decode_image: channels must be 1 or 3");
  if (bytes.empty()) {
    reason = "empty file (0 bytes)";
    return false;
  }
  switch (sniff_image(bytes)) {
    case ImageKind::jpeg: return decode_jpeg(bytes, channels, limits, min_side, out, reason);
    case ImageKind::png: return decode_png(bytes, channels, limits, out, reason);
    default: reason = "not a JPEG or PNG file (by its first bytes)"; return false;
  }
}

bool image_size(std::span<const uint8_t> bytes, const ImageLimits& limits, int& width, int& height, std::string& reason) {
  int64_t w = 0, h = 0;
  switch (sniff_image(bytes)) {
    case ImageKind::jpeg: {
      tjhandle t = tjInitDecompress();
      if (!t) {
        reason = "cannot start the JPEG decoder";
        return false;
      }
      int iw = 0, ih = 0, subsamp = 0, cs = 0;
      const int rc = tjDecompressHeader3(t, const_cast<unsigned char*>(bytes.data()), static_cast<unsigned long>(bytes.size()),
                                         &iw, &ih, &subsamp, &cs);
      if (rc != 0) reason = std::string("not a readable JPEG: ") + tjGetErrorStr2(t);
      tjDestroy(t);
      if (rc != 0) return false;
      w = iw;
      h = ih;
      break;
    }
    case ImageKind::png: {
      // The signature, then the IHDR chunk: length (4 bytes), "IHDR", width and height big-endian.
      if (bytes.size() < 24 || std::memcmp(bytes.data() + 12, "IHDR", 4) != 0) {
        reason = "not a readable PNG: no IHDR chunk first";
        return false;
      }
      auto be32 = [&](size_t at) {
        return (int64_t{bytes[at]} << 24) | (int64_t{bytes[at + 1]} << 16) | (int64_t{bytes[at + 2]} << 8) | bytes[at + 3];
      };
      w = be32(16);
      h = be32(20);
      break;
    }
    default: reason = bytes.empty() ? "empty file (0 bytes)" : "not a JPEG or PNG file (by its first bytes)"; return false;
  }
  if (too_large(w, h, limits, reason)) return false;
  width = static_cast<int>(w);
  height = static_cast<int>(h);
  return true;
}

Image8 resize_shorter_center_crop(const Image8& in, int size) {
  if (size < 1 || in.width < 1 || in.height < 1 || in.channels < 1 ||
      in.pixels.size() != static_cast<size_t>(in.width) * in.height * in.channels)
    throw std::invalid_argument("resize_shorter_center_crop: size " + std::to_string(size) + " of a " +
                                std::to_string(in.width) + " x " + std::to_string(in.height) + " image");
  // torchvision: the shorter side to `size`, the longer to int(size * long / short).
  const bool wide = in.width >= in.height;
  const int64_t shorter = wide ? in.height : in.width, longer = wide ? in.width : in.height;
  const int new_long = static_cast<int>(static_cast<int64_t>(size) * longer / shorter);
  const int new_w = wide ? new_long : size, new_h = wide ? size : new_long;
  // CenterCrop's offset: Python's round(), ties to even (nearbyint in the default rounding mode).
  const int left = static_cast<int>(std::nearbyint((new_w - size) / 2.0));
  const int top = static_cast<int>(std::nearbyint((new_h - size) / 2.0));
  Image8 out;
  out.width = out.height = size;
  out.channels = in.channels;
  out.pixels.resize(static_cast<size_t>(size) * size * in.channels);
  resample_bilinear(in.pixels.data(), in.width, in.width, in.height, in.channels, new_w, new_h, left, top, size, size,
                    out.pixels.data());
  return out;
}

Image8 fit_longer_side(const Image8& in, int max_side) {
  const int longer = std::max(in.width, in.height);
  if (longer <= max_side) return in;
  auto scaled = [&](int v) { return std::max(1, static_cast<int>(std::lround(static_cast<double>(v) * max_side / longer))); };
  const int w = in.width >= in.height ? max_side : scaled(in.width);
  const int h = in.width >= in.height ? scaled(in.height) : max_side;
  Image8 out;
  out.width = w;
  out.height = h;
  out.channels = in.channels;
  out.pixels.resize(static_cast<size_t>(w) * h * in.channels);
  resample_bilinear(in.pixels.data(), in.width, in.width, in.height, in.channels, w, h, 0, 0, w, h, out.pixels.data());
  return out;
}

std::vector<uint8_t> encode_jpeg(const Image8& img, int quality) {
  tjhandle h = tjInitCompress();
  if (!h) throw std::runtime_error("cannot start the JPEG encoder");
  struct Closer {
    tjhandle h;
    unsigned char* buf = nullptr;
    ~Closer() {
      if (buf) tjFree(buf);
      tjDestroy(h);
    }
  } c{h};
  unsigned long size = 0;
  const bool gray = img.channels == 1;
  if (tjCompress2(h, img.pixels.data(), img.width, img.width * img.channels, img.height, gray ? TJPF_GRAY : TJPF_RGB,
                  &c.buf, &size, gray ? TJSAMP_GRAY : TJSAMP_420, quality, 0) != 0)
    throw std::runtime_error(std::string("JPEG encoding failed: ") + tjGetErrorStr2(h));
  return std::vector<uint8_t>(c.buf, c.buf + size);
}

}  // namespace ht
