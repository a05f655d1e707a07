// Windowed JPEG decoding (decode_image_window, io/dataset/jpeg_window.cpp) against the whole-image
// decode, and the encoded loader's RandomResizedCrop against PIL (/usr/bin/python3 with python3-pil,
// a test dependency): Image.open(file).convert("RGB").crop(box).resize((S, S), BILINEAR), mirrored
// where the loader mirrors, must equal the loader's bytes exactly.
#include <catch2/catch.hpp>
#include <turbojpeg.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "tests/unit/loader_test_util.hpp"
#include "io/dataset/augment.hpp"
#include "io/dataset/dataset.hpp"
#include "io/dataset/dataset_h5.hpp"
#include "io/dataset/image_decode.hpp"
#include "temp_dir_util.hpp"

using namespace ht;

namespace {

// A W x H RGB picture with smooth gradients, edges and noise (so every DCT band is used).
Image8 picture(int W, int H, uint64_t seed) {
  Image8 im;
  im.width = W;
  im.height = H;
  im.channels = 3;
  im.pixels.resize(static_cast<size_t>(W) * H * 3);
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x) {
      const uint64_t h = splitmix64(seed ^ (static_cast<uint64_t>(y) << 32 | static_cast<uint64_t>(x)));
      const int noise = static_cast<int>(h % 25) - 12;
      const int v[3] = {128 + static_cast<int>(90 * std::sin(0.05 * x + 0.02 * y)) + noise,
                        ((x / 17 + y / 13) % 2) * 160 + 40 + noise, (x * 255) / W};
      for (int c = 0; c < 3; ++c)
        im.pixels[(static_cast<size_t>(y) * W + x) * 3 + c] = static_cast<uint8_t>(std::clamp(v[c], 0, 255));
    }
  return im;
}

std::vector<uint8_t> jpeg(const Image8& im, int subsamp, int flags) {
  tjhandle h = tjInitCompress();
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  REQUIRE(tjCompress2(h, im.pixels.data(), im.width, im.width * 3, im.height, TJPF_RGB, &buf, &size, subsamp, 90,
                      flags) == 0);
  std::vector<uint8_t> out(buf, buf + size);
  tjFree(buf);
  tjDestroy(h);
  return out;
}

}  // namespace

TEST_CASE("decode_image_window: the window's pixels are the whole decode's, every subsampling", "[dataset][decode]") {
  const int W = 333, H = 251;  // not multiples of the 16-pixel MCU
  const Image8 im = picture(W, H, 3);
  struct Kind {
    const char* name;
    int subsamp, flags;
  };
  for (Kind k : {Kind{"4:2:0", TJSAMP_420, 0}, Kind{"4:4:4", TJSAMP_444, 0}, Kind{"4:2:2", TJSAMP_422, 0},
                 Kind{"4:4:0", TJSAMP_440, 0}, Kind{"4:1:1", TJSAMP_411, 0}, Kind{"gray", TJSAMP_GRAY, 0}, Kind{"4:2:0 progressive", TJSAMP_420, TJFLAG_PROGRESSIVE}}) {
    INFO(k.name);
    const std::vector<uint8_t> file = jpeg(im, k.subsamp, k.flags);
    Image8 full;
    std::string why;
    REQUIRE(decode_image(file, 3, ImageLimits{}, 0, full, why));
    int w = 0, h = 0;
    REQUIRE(image_size(file, ImageLimits{}, w, h, why));
    REQUIRE((w == W && h == H));
    std::vector<CropBox> boxes = {{0, 0, H, W}, {0, 0, 1, 1}, {H - 1, W - 1, 1, 1}, {0, W - 7, H, 7}, {H - 5, 0, 5, W},
                                  {17, 31, 100, 150}, {8, 16, 16, 32}};
    for (int64_t i = 0; i < 200; ++i) boxes.push_back(resized_crop_box(9, 0, i, H, W, 0.02));
    Image8 out;
    for (const CropBox& b : boxes) {
      INFO("box y " << b.y << " x " << b.x << " h " << b.h << " w " << b.w);
      CropBox at;
      // min sides larger than any window: no DCT scaling, so exactly the whole decode's pixels.
      REQUIRE(decode_image_window(file, 3, ImageLimits{}, b, 100000, 100000, out, at, why));
      REQUIRE((at.h == b.h && at.w == b.w));
      REQUIRE(at.x >= 0);
      REQUIRE(at.y >= 0);
      REQUIRE(at.x + at.w <= out.width);
      REQUIRE(at.y + at.h <= out.height);
      int differ = 0;
      for (int y = 0; y < b.h; ++y)
        differ += std::memcmp(&out.pixels[(static_cast<size_t>(at.y + y) * out.width + at.x) * 3],
                              &full.pixels[(static_cast<size_t>(b.y + y) * W + b.x) * 3], static_cast<size_t>(b.w) * 3) != 0;
      REQUIRE(differ == 0);
    }
  }
}

TEST_CASE("decode_image_window: the largest DCT scale keeping the window the asked size, pixels as TurboJPEG's scaled decode", "[dataset][decode]") {
  const int W = 900, H = 700;
  const std::vector<uint8_t> file = jpeg(picture(W, H, 5), TJSAMP_420, 0);
  Image8 out;
  std::string why;
  struct Case {
    CropBox box;
    int min_side, d;
  };
  for (Case c : {Case{{0, 0, 700, 900}, 80, 8}, Case{{10, 20, 600, 500}, 200, 2}, Case{{100, 100, 447, 600}, 224, 1},
                 Case{{33, 47, 448, 449}, 224, 2}, Case{{1, 3, 400, 400}, 100, 4}}) {
    const CropBox& b = c.box;
    INFO("box y " << b.y << " x " << b.x << " h " << b.h << " w " << b.w << " min " << c.min_side);
    CropBox at;
    REQUIRE(decode_image_window(file, 3, ImageLimits{}, b, c.min_side, c.min_side, out, at, why));
    const int d = c.d;
    const int sw = (W + d - 1) / d, sh = (H + d - 1) / d;
    const int ex0 = b.x / d, ey0 = b.y / d;
    CHECK(at.w == std::min(sw, (b.x + b.w + d - 1) / d) - ex0);
    CHECK(at.h == std::min(sh, (b.y + b.h + d - 1) / d) - ey0);
    CHECK(at.w >= c.min_side);
    CHECK(at.h >= c.min_side);
    // The window of TurboJPEG's whole-image decode at the same scale 1/d: exactly equal.
    tjhandle t = tjInitDecompress();
    std::vector<uint8_t> whole(static_cast<size_t>(sw) * sh * 3);
    REQUIRE(tjDecompress2(t, file.data(), static_cast<unsigned long>(file.size()), whole.data(), sw, sw * 3, sh, TJPF_RGB,
                          0) == 0);
    tjDestroy(t);
    int differ = 0;
    for (int y = 0; y < at.h; ++y)
      differ += std::memcmp(&out.pixels[(static_cast<size_t>(at.y + y) * out.width + at.x) * 3],
                            &whole[(static_cast<size_t>(ey0 + y) * sw + ex0) * 3], static_cast<size_t>(at.w) * 3) != 0;
    CHECK(differ == 0);
  }
}

TEST_CASE("decode_image_window: bad files are refused with a reason, CMYK and PNG decoded whole", "[dataset][decode]") {
  const Image8 im = picture(64, 48, 7);
  std::vector<uint8_t> file = jpeg(im, TJSAMP_420, 0);
  Image8 out;
  CropBox at;
  std::string why;
  std::vector<uint8_t> cut(file.begin(), file.begin() + static_cast<std::ptrdiff_t>(file.size() / 2));
  // Truncated: the window near the bottom needs the missing half.
  CHECK_FALSE(decode_image_window(cut, 3, ImageLimits{}, CropBox{40, 0, 8, 64}, 1000, 1000, out, at, why));
  CHECK(why.find("JPEG") != std::string::npos);
  std::vector<uint8_t> junk = {0xFF, 0xD8, 0xFF, 0x00, 0x01};
  CHECK_FALSE(decode_image_window(junk, 3, ImageLimits{}, CropBox{0, 0, 1, 1}, 1, 1, out, at, why));
  int w = 0, h = 0;
  ImageLimits small;
  small.max_pixels = 1000;
  CHECK_FALSE(image_size(file, small, w, h, why));
  CHECK(why.find("64 x 48") != std::string::npos);
  CHECK_THROWS_AS(decode_image_window(file, 3, ImageLimits{}, CropBox{0, 0, 49, 10}, 1, 1, out, at, why),
                  std::invalid_argument);
  // CMYK: decoded whole by decode_image, then the window.
  tjhandle t = tjInitCompress();
  std::vector<uint8_t> cmyk(static_cast<size_t>(64) * 48 * 4);
  for (size_t i = 0; i < cmyk.size(); ++i) cmyk[i] = static_cast<uint8_t>(splitmix64(i) & 0xFF);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  REQUIRE(tjCompress2(t, cmyk.data(), 64, 64 * 4, 48, TJPF_CMYK, &buf, &size, TJSAMP_444, 90, 0) == 0);
  std::vector<uint8_t> cfile(buf, buf + size);
  tjFree(buf);
  tjDestroy(t);
  Image8 full;
  REQUIRE(decode_image(cfile, 3, ImageLimits{}, 0, full, why));
  REQUIRE(decode_image_window(cfile, 3, ImageLimits{}, CropBox{5, 6, 20, 30}, 1, 1, out, at, why));
  for (int y = 0; y < 20; ++y)
    REQUIRE(std::memcmp(&out.pixels[(static_cast<size_t>(at.y + y) * out.width + at.x) * 3],
                        &full.pixels[(static_cast<size_t>(5 + y) * 64 + 6) * 3], 30 * 3) == 0);
}

TEST_CASE("encoded loader: RandomResizedCrop over the whole photo equals PIL's crop + resize + mirror", "[dataset][decode]") {
  if (std::system("/usr/bin/python3 -c 'import PIL' 2>/dev/null") != 0) {
    WARN("/usr/bin/python3 with PIL (python3-pil) not found: the PIL comparison is not run");
    CHECK(false);  // python3-pil is a test dependency (scripts/install_deps.sh)
    return;
  }
  const auto dir = ht::test::fresh_temp_dir("ht_window", "loader");
  const int S = 56, N = 16;  // photos of 60-119 pixels a side: every box is under 2 S, so no DCT scaling
  EncodedSamples enc;
  std::vector<int32_t> labels;
  std::vector<std::pair<int, int>> sizes;
  for (int i = 0; i < N; ++i) {
    const int W = 60 + (i * 37) % 60, H = 60 + (i * 23) % 60;
    sizes.emplace_back(W, H);
    const std::vector<uint8_t> f = jpeg(picture(W, H, 100 + i), i % 3 == 0 ? TJSAMP_444 : TJSAMP_420,
                                        i % 4 == 1 ? TJFLAG_PROGRESSIVE : 0);
    std::ofstream(dir / (std::to_string(i) + ".jpg"), std::ios::binary).write(reinterpret_cast<const char*>(f.data()),
                                                                               static_cast<std::streamsize>(f.size()));
    enc.bytes.insert(enc.bytes.end(), f.begin(), f.end());
    enc.offsets.push_back(static_cast<int64_t>(enc.bytes.size()));
    labels.push_back(i % 2);
  }
  DatasetInfo info;
  info.height = info.width = 64;  // the split's nominal size; the windows come from the photos themselves
  info.channels = 3;
  info.num_classes = 2;
  info.class_names = {"a", "b"};
  info.mean = {0.5f, 0.4f, 0.3f};
  info.std = {0.25f, 0.2f, 0.3f};
  info.source = "test";
  write_dataset_shard((dir / shard_file_name("train", 0, 1)).string(), info, "train", 0, 1, {}, labels, 0, &enc);
  auto ds = open_sharded_dataset(dir.string(), "train");
  REQUIRE(ds->info().encoded);
  DataLoader dl(ds, test::resized_crop_options(77, S, Layout::NCHW, 2));
  const int epoch = 3;
  dl.start_epoch(epoch);
  std::map<int64_t, std::vector<uint8_t>> got;  // HWC bytes, the normalisation undone exactly
  Batch b;
  while (dl.next(b))
    for (size_t k = 0; k < b.indices.size(); ++k) {
      REQUIRE(b.labels.data<int32_t>()[k] == labels[static_cast<size_t>(b.indices[k])]);
      std::vector<uint8_t> px(static_cast<size_t>(S) * S * 3);
      for (int c = 0; c < 3; ++c)
        for (int p = 0; p < S * S; ++p) {
          const float v = b.images.data<float>()[(k * 3 + c) * S * S + p];
          int best = -1;
          for (int u = 0; u < 256 && best < 0; ++u)
            if (normalize_pixel(static_cast<uint8_t>(u), info.mean[c], 1.0f / info.std[c]) == v) best = u;
          REQUIRE(best >= 0);
          px[static_cast<size_t>(p) * 3 + c] = static_cast<uint8_t>(best);
        }
      got[b.indices[k]] = px;
    }
  REQUIRE(got.size() == static_cast<size_t>(N));
  std::ofstream boxes(dir / "boxes.txt");
  int flips = 0, partial = 0;
  for (int i = 0; i < N; ++i) {
    const CropBox bx = resized_crop_box(77, epoch, i, sizes[i].second, sizes[i].first, 0.08);
    const bool f = aug_params(77, epoch, i, 0, true).flip;
    boxes << i << " " << bx.y << " " << bx.x << " " << bx.h << " " << bx.w << " " << (f ? 1 : 0) << "\n";
    flips += f;
    partial += bx.w < sizes[i].first || bx.h < sizes[i].second;
  }
  boxes.close();
  std::ofstream(dir / "ref.py") << "import sys\n"
                                   "from PIL import Image\n"
                                   "d = sys.argv[1]\n"
                                   "for line in open(d + '/boxes.txt'):\n"
                                   "    i, y, x, h, w, f = map(int, line.split())\n"
                                   "    im = Image.open(f'{d}/{i}.jpg').convert('RGB')\n"
                                   "    im = im.crop((x, y, x + w, y + h)).resize(("
                                << S << ", " << S
                                << "), Image.BILINEAR)\n"
                                   "    if f: im = im.transpose(Image.FLIP_LEFT_RIGHT)\n"
                                   "    open(f'{d}/{i}.ref', 'wb').write(im.tobytes())\n";
  REQUIRE(std::system(("/usr/bin/python3 " + (dir / "ref.py").string() + " " + dir.string()).c_str()) == 0);
  for (int i = 0; i < N; ++i) {
    std::ifstream in(dir / (std::to_string(i) + ".ref"), std::ios::binary);
    std::vector<uint8_t> ref((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    INFO("sample " << i << " of " << sizes[i].first << " x " << sizes[i].second);
    REQUIRE(ref == got[i]);
  }
  CHECK(flips > 2);     // both mirrored and plain samples were compared
  CHECK(partial > 8);   // and boxes that are a part of the photo

  // A flipped byte inside a stored photo: its chunk's fletcher32 check names the file (the bytes are
  // read with pread through the chunk map, not by HDF5).
  const std::string shard = (dir / shard_file_name("train", 0, 1)).string();
  std::vector<uint8_t> file;
  {
    std::ifstream in(shard, std::ios::binary);
    file.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const std::vector<uint8_t> photo(enc.bytes.begin() + enc.offsets[5], enc.bytes.begin() + enc.offsets[6]);
  const auto at = std::search(file.begin(), file.end(), photo.begin(), photo.end());
  REQUIRE(at != file.end());
  std::fstream(shard, std::ios::binary | std::ios::in | std::ios::out)
      .seekp(at - file.begin() + static_cast<std::ptrdiff_t>(photo.size() / 2))
      .put(static_cast<char>(photo[photo.size() / 2] ^ 0x40));
  auto bad = open_sharded_dataset(dir.string(), "train");
  Image8 decoded;
  CropBox w;
  int32_t label = -1;
  auto whole = [](int h, int wd) { return CropBox{0, 0, h, wd}; };
  try {
    bad->read_window(5, whole, S, S, decoded, w, label);
    FAIL("a corrupt chunk was read without an error");
  } catch (const std::exception& e) {
    CHECK(std::string(e.what()).find("fletcher32") != std::string::npos);
    CHECK(std::string(e.what()).find(shard) != std::string::npos);
  }
  std::filesystem::remove_all(dir);
}
