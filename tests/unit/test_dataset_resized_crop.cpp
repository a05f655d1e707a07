// RandomResizedCrop and the centre crop of the DataLoader against torchvision's semantics: the box
// draw (ranges, fallback, determinism) here, and the pixels against PIL itself, which the test runs
// (/usr/bin/python3 with python3-pil, a test dependency): PIL's crop + resize(BILINEAR) + mirror of
// the same image and boxes must equal the loader's bytes exactly.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <tuple>
#include <string>
#include <unistd.h>

#include "tests/unit/loader_test_util.hpp"
#include "io/dataset/augment.hpp"
#include "io/dataset/dataset.hpp"
#include "io/dataset/resample.hpp"

using namespace ht;
namespace fs = std::filesystem;

TEST_CASE("resized crop box: torchvision's ranges, deterministic, fallback to the centre", "[dataset][augment]") {
  const int H = 60, W = 80;
  int inside = 0;
  double min_frac = 1, max_frac = 0, min_ratio = 10, max_ratio = 0;
  for (int64_t i = 0; i < 2000; ++i) {
    CropBox b = resized_crop_box(5, 2, i, H, W, 0.08);
    REQUIRE(b.h > 0);
    REQUIRE(b.w > 0);
    REQUIRE(b.y >= 0);
    REQUIRE(b.x >= 0);
    REQUIRE(b.y + b.h <= H);
    REQUIRE(b.x + b.w <= W);
    const CropBox again = resized_crop_box(5, 2, i, H, W, 0.08);
    REQUIRE((again.y == b.y && again.x == b.x && again.h == b.h && again.w == b.w));
    const double frac = static_cast<double>(b.h) * b.w / (H * W), ratio = static_cast<double>(b.w) / b.h;
    min_frac = std::min(min_frac, frac);
    max_frac = std::max(max_frac, frac);
    min_ratio = std::min(min_ratio, ratio);
    max_ratio = std::max(max_ratio, ratio);
    inside += b.w < W || b.h < H;
  }
  // Rounded sides: the area fraction and ratio stay near [0.08, 1] and [3/4, 4/3].
  CHECK(min_frac < 0.1);
  CHECK(min_frac > 0.06);
  CHECK(max_frac > 0.8);
  CHECK(min_ratio > 0.7);
  CHECK(max_ratio < 1.45);
  CHECK(inside > 1900);
  // No try fits (min scale 1 on a 1:4 image: every ratio in [3/4, 4/3] needs more than the width or
  // height): torchvision's fallback, the widest window with ratio 3/4, centred.
  CropBox f = resized_crop_box(5, 0, 7, 100, 25, 1.0);
  CHECK(f.w == 25);
  CHECK(f.h == 33);  // round(25 / 0.75) = round(33.33)
  CHECK(f.x == 0);
  CHECK(f.y == 33);  // (100 - 33) // 2
  // Centre crop: offsets round((H - h) / 2), ties to even.
  CropBox c = center_crop_box(257, 259, 256, 256);
  CHECK(c.y == 0);  // round(0.5) = 0
  CHECK(c.x == 2);  // round(1.5) = 2
}

TEST_CASE("resized crop: the loader's pixels equal PIL's crop + resize + mirror", "[dataset][augment]") {
  if (std::system("/usr/bin/python3 -c 'import PIL' 2>/dev/null") != 0) {
    WARN("/usr/bin/python3 with PIL (python3-pil) not found: the PIL comparison is not run");
    CHECK(false);  // python3-pil is a test dependency (scripts/install_deps.sh)
    return;
  }
  const int H = 37, W = 53, C = 3, S = 24;  // odd sizes: uneven taps; S both above and below the boxes
  const int64_t N = 24;
  auto ds = make_synthetic_dataset(N, H, W, C, 4, 17, "train");
  LoaderOptions o = test::resized_crop_options(123, S, Layout::NHWC, 3);
  o.prefetch = false;
  const DatasetInfo& info = ds->info();
  DataLoader dl(ds, o);
  dl.start_epoch(1);
  // The loader's bytes (undoing the normalisation exactly: one float per byte value).
  std::map<int64_t, std::vector<uint8_t>> got;
  Batch b;
  while (dl.next(b))
    for (size_t k = 0; k < b.indices.size(); ++k) {
      std::vector<uint8_t> px(static_cast<size_t>(S) * S * C);
      for (size_t p = 0; p < px.size(); ++p) {
        const float v = b.images.data<float>()[k * px.size() + p];
        int best = -1;
        for (int u = 0; u < 256 && best < 0; ++u)
          if (normalize_pixel(static_cast<uint8_t>(u), info.mean[p % C], 1.0f / info.std[p % C]) == v) best = u;
        REQUIRE(best >= 0);
        px[p] = static_cast<uint8_t>(best);
      }
      got[b.indices[k]] = px;
    }
  REQUIRE(got.size() == N);

  // The same samples through PIL.
  const fs::path dir = fs::temp_directory_path() / ("ht_rrc_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream boxes(dir / "boxes.txt");
  for (int64_t i = 0; i < N; ++i) {
    std::vector<uint8_t> raw(static_cast<size_t>(H) * W * C);
    std::vector<int32_t> lab(1);
    std::vector<int64_t> ii = {i};
    ds->read(ii, raw, lab);
    std::ofstream(dir / (std::to_string(i) + ".rgb"), std::ios::binary).write(reinterpret_cast<char*>(raw.data()), raw.size());
    CropBox bx = resized_crop_box(123, 1, i, H, W, 0.08);
    boxes << i << " " << bx.y << " " << bx.x << " " << bx.h << " " << bx.w << " "
          << (aug_params(123, 1, i, 0, true).flip ? 1 : 0) << "\n";
  }
  boxes.close();
  const std::string script =
      "import sys\n"
      "from PIL import Image\n"
      "d = sys.argv[1]\n"
      "for line in open(d + '/boxes.txt'):\n"
      "    i, y, x, h, w, f = map(int, line.split())\n"
      "    im = Image.frombytes('RGB', (" + std::to_string(W) + ", " + std::to_string(H) + "), open(f'{d}/{i}.rgb', 'rb').read())\n"
      "    im = im.crop((x, y, x + w, y + h)).resize((" + std::to_string(S) + ", " + std::to_string(S) + "), Image.BILINEAR)\n"
      "    if f: im = im.transpose(Image.FLIP_LEFT_RIGHT)\n"
      "    open(f'{d}/{i}.ref', 'wb').write(im.tobytes())\n";
  std::ofstream(dir / "ref.py") << script;
  REQUIRE(std::system(("/usr/bin/python3 " + (dir / "ref.py").string() + " " + dir.string()).c_str()) == 0);
  int flips = 0, upscaled = 0;
  for (int64_t i = 0; i < N; ++i) {
    std::ifstream in(dir / (std::to_string(i) + ".ref"), std::ios::binary);
    std::vector<uint8_t> ref((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    INFO("sample " << i);
    REQUIRE(ref == got[i]);
    flips += aug_params(123, 1, i, 0, true).flip;
    CropBox bx = resized_crop_box(123, 1, i, H, W, 0.08);
    upscaled += bx.w < S;
  }
  CHECK(flips > 3);     // both mirrored and plain samples were compared
  CHECK(upscaled > 3);  // and boxes both smaller and larger than the output
  fs::remove_all(dir);
}

TEST_CASE("centre crop: the eval loader keeps the centre window, as CenterCrop", "[dataset][augment]") {
  const int H = 9, W = 12, C = 2;
  auto ds = make_synthetic_dataset(6, H, W, C, 3, 5, "test");
  LoaderOptions o;
  o.train = false;
  o.eval_batch = 4;
  o.crop_size = 6;
  o.layout = Layout::NHWC;
  o.resized_crop = true;  // ignored in eval
  DataLoader dl(ds, o);
  dl.start_epoch(0);
  Batch b;
  const DatasetInfo& info = ds->info();
  while (dl.next(b)) {
    REQUIRE(b.images.shape()[1] == 6);
    for (size_t k = 0; k < b.indices.size(); ++k) {
      std::vector<uint8_t> raw(static_cast<size_t>(H) * W * C);
      std::vector<int32_t> lab(1);
      std::vector<int64_t> ii = {b.indices[k]};
      ds->read(ii, raw, lab);
      const CropBox c = center_crop_box(H, W, 6, 6);  // y = round(1.5) = 2, x = 3
      REQUIRE(c.y == 2);
      REQUIRE(c.x == 3);
      for (int y = 0; y < 6; ++y)
        for (int x = 0; x < 6; ++x)
          for (int ch = 0; ch < C; ++ch) {
            const uint8_t v = raw[(static_cast<size_t>(c.y + y) * W + c.x + x) * C + ch];
            REQUIRE(b.images.data<float>()[k * 72 + (y * 6 + x) * C + ch] ==
                    normalize_pixel(v, info.mean[ch], 1.0f / info.std[ch]));
          }
    }
  }
}

TEST_CASE("loader threads: the same batches on 1 and 4 threads, every augmentation", "[dataset][augment]") {
  auto ds = make_synthetic_dataset(40, 19, 23, 3, 4, 9, "train");
  auto batches = [&](int threads, bool resized, int pad, int crop) {
    LoaderOptions o = test::resized_crop_options(5, crop, Layout::NCHW, threads);
    o.crop_padding = pad;
    o.resized_crop = resized;
    DataLoader dl(ds, o);
    dl.start_epoch(2);
    std::vector<float> all;
    Batch b;
    while (dl.next(b)) all.insert(all.end(), b.images.data<float>(), b.images.data<float>() + b.images.numel());
    return all;
  };
  for (auto [resized, pad, crop] : {std::tuple{true, 0, 16}, {false, 2, 0}, {false, 1, 12}}) {
    INFO("resized " << resized << " pad " << pad << " crop " << crop);
    auto one = batches(1, resized, pad, crop);
    REQUIRE(!one.empty());
    CHECK(one == batches(4, resized, pad, crop));
  }
}
