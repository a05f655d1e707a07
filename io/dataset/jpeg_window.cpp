// decode_image_window (image_decode.hpp): a window of a JPEG decoded through libjpeg's own API, which
// (unlike TurboJPEG 2.1's) can skip rows (jpeg_skip_scanlines) and crop columns (jpeg_crop_scanline);
// PNG and CMYK JPEG are decoded whole and cropped.
#include "io/dataset/image_decode.hpp"

#include <cstdio>  // jpeglib.h needs FILE
#include <jpeglib.h>

#include <algorithm>
#include <csetjmp>
#include <functional>
#include <cstring>
#include <stdexcept>

namespace ht {
namespace {

// libjpeg reports errors by longjmp to decode_jpeg_window, whose objects with destructors are all
// constructed before its setjmp (so no destructor is ever skipped or run twice).
struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void jpeg_on_error(j_common_ptr c) {
  auto* e = reinterpret_cast<JpegError*>(c->err);
  c->err->format_message(c, e->message);
  std::longjmp(e->jump, 1);
}

// Level -1 is a warning (corrupt or truncated data): an error here, as decode_image's
// TJFLAG_STOPONWARNING. Levels >= 0 are trace messages.
void jpeg_on_message(j_common_ptr c, int level) {
  if (level < 0) jpeg_on_error(c);
}

// decode_image's TJFLAG_LIMITSCANS: a progressive JPEG of more than 500 scans is refused (each scan
// costs a pass over the coefficients; a crafted file can hold millions).
void jpeg_on_progress(j_common_ptr c) {
  if (!c->is_decompressor || reinterpret_cast<j_decompress_ptr>(c)->input_scan_number <= 500) return;
  auto* e = reinterpret_cast<JpegError*>(c->err);
  std::snprintf(e->message, sizeof e->message, "progressive JPEG of more than 500 scans");
  std::longjmp(e->jump, 1);
}

int ceil_div(int a, int b) { return (a + b - 1) / b; }

enum class Window { done, failed, whole };  // whole: not a case for the windowed path

/// Throws std::invalid_argument when `box` does not lie inside a w x h image.
void check_inside(const CropBox& box, int64_t w, int64_t h) {
  if (box.x < 0 || box.y < 0 || box.w < 1 || box.h < 1 || box.x + box.w > w || box.y + box.h > h)
    throw std::invalid_argument("decode_image_window: window " + std::to_string(box.w) + " x " + std::to_string(box.h) +
                                " at (" + std::to_string(box.x) + ", " + std::to_string(box.y) + ") outside a " +
                                std::to_string(w) + " x " + std::to_string(h) + " image");
}

// The RGB window of a gray, YCbCr or RGB JPEG (Window::whole for CMYK/YCCK).
Window decode_jpeg_window(std::span<const uint8_t> bytes, const ImageLimits& lim,
                          const std::function<CropBox(int, int)>& pick, int min_w, int min_h, Image8& out,
                          CropBox& window, std::string& reason) {
  jpeg_decompress_struct cinfo;
  JpegError err;
  jpeg_progress_mgr progress{};
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_on_error;
  err.mgr.emit_message = jpeg_on_message;
  err.message[0] = '\0';
  progress.progress_monitor = jpeg_on_progress;
  jpeg_create_decompress(&cinfo);
  struct Destroy {
    jpeg_decompress_struct* c;
    ~Destroy() { jpeg_destroy_decompress(c); }
  } destroy{&cinfo};
  if (setjmp(err.jump)) {
    reason = std::string("JPEG data cannot be decoded: ") + err.message;
    return Window::failed;
  }
  jpeg_mem_src(&cinfo, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&cinfo, TRUE);
  const int64_t w = cinfo.image_width, h = cinfo.image_height;
  if (w < 1 || h < 1 || w > lim.max_side || h > lim.max_side || w * h > lim.max_pixels) return Window::whole;
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) return Window::whole;
  const CropBox box = pick(static_cast<int>(h), static_cast<int>(w));
  check_inside(box, w, h);
  int d = 1;
  for (int c : {8, 4, 2})
    if (box.w >= static_cast<int64_t>(min_w) * c && box.h >= static_cast<int64_t>(min_h) * c) {
      d = c;
      break;
    }
  cinfo.scale_num = 1;
  cinfo.scale_denom = static_cast<unsigned>(d);
  cinfo.out_color_space = JCS_RGB;  // gray replicated, as decode_image
  cinfo.dct_method = JDCT_ISLOW;    // TurboJPEG's (and PIL's) default, so d = 1 gives decode_image's pixels
  cinfo.progress = &progress;
  jpeg_start_decompress(&cinfo);
  const int sw = static_cast<int>(cinfo.output_width), sh = static_cast<int>(cinfo.output_height);
  const int x0 = box.x / d, y0 = box.y / d;
  const int x1 = std::min(sw, ceil_div(box.x + box.w, d)), y1 = std::min(sh, ceil_div(box.y + box.h, d));
  // Decoded with a margin of 2 pixels around the window (one chroma sample of 4:2:0): without it the
  // pixels at the window's edge can differ from a whole decode's (fancy upsampling reads one chroma
  // neighbour each way; tests/unit/test_image_window.cpp finds the difference at margin 0).
  constexpr int margin = 2;
  JDIMENSION cx = static_cast<JDIMENSION>(std::max(0, x0 - margin));
  JDIMENSION cw = static_cast<JDIMENSION>(std::min(sw, x1 + margin)) - cx;
  jpeg_crop_scanline(&cinfo, &cx, &cw);  // cx moves down to a block boundary, cw grows to match
  const int first = std::max(0, y0 - margin);
  if (first > 0) jpeg_skip_scanlines(&cinfo, static_cast<JDIMENSION>(first));
  // Rows first .. y1 - 1 straight into `out`, columns cx .. cx + cw - 1; the window lies inside.
  out.width = static_cast<int>(cw);
  out.height = y1 - first;
  out.channels = 3;
  out.pixels.resize(static_cast<size_t>(out.width) * out.height * 3);
  window = CropBox{y0 - first, x0 - static_cast<int>(cx), y1 - y0, x1 - x0};
  while (static_cast<int>(cinfo.output_scanline) < y1) {
    JSAMPROW rows[8];
    const int y = static_cast<int>(cinfo.output_scanline), n = std::min(8, y1 - y);
    for (int r = 0; r < n; ++r) rows[r] = out.pixels.data() + static_cast<size_t>(y - first + r) * out.width * 3;
    jpeg_read_scanlines(&cinfo, rows, static_cast<JDIMENSION>(n));
  }
  jpeg_abort_decompress(&cinfo);  // the rows below the window are never decoded
  return Window::done;
}

}  // namespace

bool decode_image_window(std::span<const uint8_t> bytes, int channels, const ImageLimits& limits,
                         const std::function<CropBox(int height, int width)>& pick, int min_w, int min_h, Image8& out,
                         CropBox& window, std::string& reason) {
  if (channels == 3 && sniff_image(bytes) == ImageKind::jpeg) {
    const Window r = decode_jpeg_window(bytes, limits, pick, min_w, min_h, out, window, reason);
    if (r != Window::whole) return r == Window::done;
  }
  if (!decode_image(bytes, channels, limits, 0, out, reason)) return false;
  window = pick(out.height, out.width);
  check_inside(window, out.width, out.height);
  return true;
}

bool decode_image_window(std::span<const uint8_t> bytes, int channels, const ImageLimits& limits, const CropBox& box,
                         int min_w, int min_h, Image8& out, CropBox& window, std::string& reason) {
  return decode_image_window(bytes, channels, limits, [&](int, int) { return box; }, min_w, min_h, out, window, reason);
}

}  // namespace ht
