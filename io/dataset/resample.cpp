// PIL's bilinear resampling, pixel for pixel (see resample.hpp).
#include "io/dataset/resample.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace ht {
namespace {

// For output pixel x of a row of out_size from in_size: the taps [begin[x], begin[x] + count[x]) with
// weights of a triangle of support 1 widened by the scale when shrinking, normalised to sum 1, then in
// fixed point with 22 fractional bits (PIL's PRECISION_BITS = 32 - 8 - 2); pixel = clip((sum + 2^21)
// >> 22). Computed only for outputs [first, first + n).
constexpr int kPrecisionBits = 32 - 8 - 2;

struct Taps {
  int ksize = 0;
  std::vector<int> begin, count;
  std::vector<int32_t> weight;  // n * ksize
};

Taps bilinear_taps(int in_size, int out_size, int first, int n) {
  const double scale = static_cast<double>(in_size) / out_size;
  const double filterscale = std::max(scale, 1.0);
  const double support = 1.0 * filterscale;
  Taps t;
  t.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  t.begin.resize(static_cast<size_t>(n));
  t.count.resize(static_cast<size_t>(n));
  t.weight.assign(static_cast<size_t>(n) * t.ksize, 0);
  std::vector<double> k(static_cast<size_t>(t.ksize));
  for (int i = 0; i < n; ++i) {
    const double center = (first + i + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      const double a = std::fabs((x + xmin - center + 0.5) * ss);
      k[static_cast<size_t>(x)] = a < 1.0 ? 1.0 - a : 0.0;
      ww += k[static_cast<size_t>(x)];
    }
    for (int x = 0; x < xmax; ++x) {
      const double w = ww != 0.0 ? k[static_cast<size_t>(x)] / ww : k[static_cast<size_t>(x)];
      t.weight[static_cast<size_t>(i) * t.ksize + x] =
          static_cast<int32_t>(w < 0 ? -0.5 + w * (1 << kPrecisionBits) : 0.5 + w * (1 << kPrecisionBits));
    }
    t.begin[static_cast<size_t>(i)] = xmin;
    t.count[static_cast<size_t>(i)] = xmax;
  }
  return t;
}

// PIL's clip8 (>= 2^30 -> 255, <= 0 -> 0, else v >> 22) without branches, so loops of it vectorise:
// an arithmetic shift keeps the sign, and the clamp does the rest.
inline uint8_t clip8(int32_t v) { return static_cast<uint8_t>(std::clamp(v >> kPrecisionBits, 0, 255)); }

// The horizontal pass of an RGB image, 8 rows at a time: the strip's columns are first laid out
// side by side (column j holds its 8 rows' 24 bytes), so each tap adds 24 products of one weight,
// which the compiler vectorises; the sums are PIL's, integer for integer. Built for AVX2 and for the
// baseline, chosen by the CPU at load time (integer arithmetic: the same bytes either way).
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target_clones("avx2", "default")))
#endif
void horizontal_pass_3(const uint8_t* src, int src_stride, int row0, int row1, const Taps& th, int cols, uint8_t* mid) {
  constexpr int R = 8, L = R * 3;
  const int cmin = th.begin.front();
  int cmax = cmin;
  for (int x = 0; x < cols; ++x) cmax = std::max(cmax, th.begin[static_cast<size_t>(x)] + th.count[static_cast<size_t>(x)]);
  std::vector<uint8_t> strip(static_cast<size_t>(cmax - cmin) * L);
  for (int y = row0; y < row1; y += R) {
    const int nr = std::min(R, row1 - y);
    if (nr < R) std::fill(strip.begin(), strip.end(), 0);
    for (int r = 0; r < nr; ++r) {
      const uint8_t* row = src + (static_cast<size_t>(y + r) * src_stride + cmin) * 3;
      uint8_t* g = strip.data() + r * 3;
      for (int j = 0; j < cmax - cmin; ++j) {
        g[static_cast<size_t>(j) * L] = row[j * 3];
        g[static_cast<size_t>(j) * L + 1] = row[j * 3 + 1];
        g[static_cast<size_t>(j) * L + 2] = row[j * 3 + 2];
      }
    }
    for (int x = 0; x < cols; ++x) {
      const int32_t* k = &th.weight[static_cast<size_t>(x) * th.ksize];
      const uint8_t* g = strip.data() + static_cast<size_t>(th.begin[static_cast<size_t>(x)] - cmin) * L;
      const int n = th.count[static_cast<size_t>(x)];
      int32_t acc[L];
      for (int j = 0; j < L; ++j) acc[j] = 1 << (kPrecisionBits - 1);
      for (int i = 0; i < n; ++i) {
        const int32_t w = k[i];
        const uint8_t* gi = g + static_cast<size_t>(i) * L;
        for (int j = 0; j < L; ++j) acc[j] += gi[j] * w;
      }
      for (int r = 0; r < nr; ++r) {
        uint8_t* o = mid + (static_cast<size_t>(y - row0 + r) * cols + x) * 3;
        o[0] = clip8(acc[r * 3]);
        o[1] = clip8(acc[r * 3 + 1]);
        o[2] = clip8(acc[r * 3 + 2]);
      }
    }
  }
}

}  // namespace

void resample_bilinear(const uint8_t* src, int src_stride, int in_w, int in_h, int C, int out_w, int out_h, int x0,
                       int y0, int cols, int rows, uint8_t* dst) {
  if (in_w < 1 || in_h < 1 || out_w < 1 || out_h < 1 || C < 1 || cols < 1 || rows < 1 || x0 < 0 || y0 < 0 ||
      x0 + cols > out_w || y0 + rows > out_h || src_stride < in_w)
    throw std::invalid_argument("resample_bilinear: window " + std::to_string(cols) + "x" + std::to_string(rows) + " at (" +
                                std::to_string(x0) + "," + std::to_string(y0) + ") of " + std::to_string(out_w) + "x" +
                                std::to_string(out_h) + " from " + std::to_string(in_w) + "x" + std::to_string(in_h));
  const bool horizontal = out_w != in_w, vertical = out_h != in_h;
  const Taps tv = vertical ? bilinear_taps(in_h, out_h, y0, rows) : Taps{};
  // The source rows the vertical pass reads (all of them pass through the horizontal pass first).
  const int row0 = vertical ? tv.begin.front() : y0;
  const int row1 = vertical ? tv.begin.back() + tv.count.back() : y0 + rows;
  // Kept per thread: a fresh buffer of this size (often over glibc's mmap threshold) would come from
  // the kernel as zeroed pages on every call.
  thread_local std::vector<uint8_t> mid;
  const uint8_t* m = src + static_cast<size_t>(row0) * src_stride * C;  // row row0 of the horizontal result
  size_t m_stride = static_cast<size_t>(src_stride) * C;              // bytes between its rows
  int m_x0 = x0;                                                       // its first column of the window
  if (horizontal) {
    const Taps th = bilinear_taps(in_w, out_w, x0, cols);
    mid.resize(static_cast<size_t>(row1 - row0) * cols * C);
    if (C == 3)
      horizontal_pass_3(src, src_stride, row0, row1, th, cols, mid.data());
    else
      for (int y = row0; y < row1; ++y) {
        const uint8_t* r = src + static_cast<size_t>(y) * src_stride * C;
        uint8_t* o = mid.data() + static_cast<size_t>(y - row0) * cols * C;
        for (int x = 0; x < cols; ++x) {
          const int32_t* k = &th.weight[static_cast<size_t>(x) * th.ksize];
          const uint8_t* p = r + static_cast<size_t>(th.begin[static_cast<size_t>(x)]) * C;
          const int n = th.count[static_cast<size_t>(x)];
          for (int c = 0; c < C; ++c) {
            int32_t ss = 1 << (kPrecisionBits - 1);
            for (int i = 0; i < n; ++i) ss += p[i * C + c] * k[i];
            o[x * C + c] = clip8(ss);
          }
        }
      }
    m = mid.data();
    m_stride = static_cast<size_t>(cols) * C;
    m_x0 = 0;
  }
  // Vertical: a row of int32 sums, one source row (one tap) at a time, which the compiler vectorises;
  // the sums are PIL's, only added in another order (integer addition: the same result).
  const size_t out_row = static_cast<size_t>(cols) * C;
  std::vector<int32_t> acc(vertical ? out_row : 0);
  for (int y = 0; y < rows; ++y) {
    uint8_t* o = dst + static_cast<size_t>(y) * out_row;
    if (!vertical) {
      std::memcpy(o, m + static_cast<size_t>(y) * m_stride + static_cast<size_t>(m_x0) * C, out_row);
      continue;
    }
    const int32_t* k = &tv.weight[static_cast<size_t>(y) * tv.ksize];
    const int first = tv.begin[static_cast<size_t>(y)] - row0, n = tv.count[static_cast<size_t>(y)];
    const uint8_t* p0 = m + static_cast<size_t>(first) * m_stride + static_cast<size_t>(m_x0) * C;
    std::fill(acc.begin(), acc.end(), 1 << (kPrecisionBits - 1));
    int32_t* __restrict a = acc.data();
    for (int i = 0; i < n; ++i) {
      const uint8_t* __restrict row = p0 + static_cast<size_t>(i) * m_stride;
      const int32_t w = k[i];
      for (size_t x = 0; x < out_row; ++x) a[x] += row[x] * w;
    }
    for (size_t x = 0; x < out_row; ++x) o[x] = clip8(a[x]);
  }
}

}  // namespace ht
