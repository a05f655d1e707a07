// Augmentation: counter-based determinism, distribution, and a match against a plain reference
// (pad with zeros, cut the window, mirror) on a non-square image; the loader applies exactly it.
#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <tuple>

#include "io/dataset/augment.hpp"
#include "io/dataset/dataset.hpp"

using namespace ht;

namespace {

// Reference: explicit zero-padded copy, then the H x W window at (oy, ox), then mirror columns.
std::vector<uint8_t> reference_augment(const std::vector<uint8_t>& img, int H, int W, int C, int pad, int oy, int ox,
                                       bool flip) {
  int PH = H + 2 * pad, PW = W + 2 * pad;
  std::vector<uint8_t> padded(static_cast<size_t>(PH) * PW * C, 0);
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x)
      for (int c = 0; c < C; ++c) padded[((y + pad) * PW + (x + pad)) * C + c] = img[(y * W + x) * C + c];
  std::vector<uint8_t> crop(static_cast<size_t>(H) * W * C);
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x)
      for (int c = 0; c < C; ++c) crop[(y * W + x) * C + c] = padded[((y + oy) * PW + (x + ox)) * C + c];
  if (!flip) return crop;
  std::vector<uint8_t> out(crop.size());
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x)
      for (int c = 0; c < C; ++c) out[(y * W + x) * C + c] = crop[(y * W + (W - 1 - x)) * C + c];
  return out;
}

}  // namespace

TEST_CASE("augment: crop and flip match the reference on a non-square image", "[dataset][augment]") {
  const int H = 5, W = 7, C = 3, pad = 2;
  std::vector<uint8_t> img(H * W * C);
  for (size_t i = 0; i < img.size(); ++i) img[i] = static_cast<uint8_t>(1 + i);  // distinct, non-zero
  std::set<std::tuple<int, int, bool>> combos;
  for (int64_t index = 0; index < 400; ++index) {
    AugParams p = aug_params(123, 2, index, pad, true);
    REQUIRE((p.oy >= 0 && p.oy <= 2 * pad && p.ox >= 0 && p.ox <= 2 * pad));
    combos.insert({p.oy, p.ox, p.flip});
    std::vector<uint8_t> out(img.size());
    augment_image(img.data(), out.data(), H, W, C, p, pad);
    REQUIRE(out == reference_augment(img, H, W, C, pad, p.oy, p.ox, p.flip));
  }
  CHECK(combos.size() == 50);  // every offset pair with and without flip occurs
  // Explicit cases, independent of the generator: shift down-right by one, and a pure mirror.
  std::vector<uint8_t> out(img.size());
  augment_image(img.data(), out.data(), H, W, C, AugParams{1, 1, false}, pad);
  CHECK(out[0] == 0);                                             // (0,0) comes from padding
  CHECK(out[((1 * W) + 1) * C + 2] == img[(0 * W + 0) * C + 2]);  // (1,1) <- (0,0)
  augment_image(img.data(), out.data(), H, W, C, AugParams{pad, pad, true}, pad);
  CHECK(out[(3 * W + 0) * C + 1] == img[(3 * W + W - 1) * C + 1]);
  augment_image(img.data(), out.data(), H, W, C, AugParams{0, 0, false}, 0);
  CHECK(out == img);  // pad 0, no flip: identity
}

TEST_CASE("augment: deterministic per (seed, epoch, index), varied across them", "[dataset][augment]") {
  int flips = 0;
  int same_epoch_change = 0;
  std::set<int> oys;
  for (int64_t i = 0; i < 4000; ++i) {
    AugParams a = aug_params(7, 1, i, 4, true), b = aug_params(7, 1, i, 4, true);
    REQUIRE((a.oy == b.oy && a.ox == b.ox && a.flip == b.flip));
    AugParams e = aug_params(7, 2, i, 4, true);
    same_epoch_change += (e.oy != a.oy || e.ox != a.ox || e.flip != a.flip);
    flips += a.flip;
    oys.insert(a.oy);
  }
  CHECK(flips > 1800);
  CHECK(flips < 2200);  // p = 0.5
  CHECK(oys.size() == 9);
  CHECK(same_epoch_change > 3500);  // another epoch draws anew
  AugParams s = aug_params(8, 1, 0, 4, true), t = aug_params(7, 1, 0, 4, true);
  (void)s;
  (void)t;
  int seed_change = 0;
  for (int64_t i = 0; i < 100; ++i) {
    AugParams u = aug_params(8, 1, i, 4, true), v = aug_params(7, 1, i, 4, true);
    seed_change += (u.oy != v.oy || u.ox != v.ox || u.flip != v.flip);
  }
  CHECK(seed_change > 80);
  CHECK_FALSE(aug_params(7, 1, 3, 4, false).flip);  // flip disabled never flips
  AugParams z = aug_params(7, 1, 3, 0, false);
  CHECK((z.oy == 0 && z.ox == 0));
}

TEST_CASE("augment: the loader applies the reference per sample, independent of world_size", "[dataset][augment]") {
  const int H = 5, W = 7, C = 3, pad = 2;
  const int64_t N = 64;
  auto ds = make_synthetic_dataset(N, H, W, C, 4, 11, "train");
  const DatasetInfo& info = ds->info();
  auto run = [&](int rank, int ws) {
    LoaderOptions o;
    o.global_batch = 8;
    o.rank = rank;
    o.world_size = ws;
    o.seed = 99;
    o.crop_padding = pad;
    o.flip = true;
    o.layout = Layout::NHWC;
    DataLoader dl(ds, o);
    dl.start_epoch(3);
    std::map<int64_t, std::vector<float>> got;
    Batch b;
    while (dl.next(b))
      for (size_t k = 0; k < b.indices.size(); ++k)
        got[b.indices[k]] = std::vector<float>(b.images.data<float>() + k * H * W * C, b.images.data<float>() + (k + 1) * H * W * C);
    return got;
  };
  auto one = run(0, 1);
  REQUIRE(one.size() == N);
  std::set<std::tuple<int, int, bool>> seen;
  for (auto& [idx, px] : one) {
    std::vector<uint8_t> raw(H * W * C);
    std::vector<int32_t> lab(1);
    std::vector<int64_t> ii = {idx};
    ds->read(ii, raw, lab);
    AugParams p = aug_params(99, 3, idx, pad, true);
    seen.insert({p.oy, p.ox, p.flip});
    auto ref = reference_augment(raw, H, W, C, pad, p.oy, p.ox, p.flip);
    for (int i = 0; i < H * W * C; ++i)
      REQUIRE(px[i] == Approx((ref[i] / 255.0 - info.mean[i % C]) / info.std[i % C]).epsilon(1e-5).margin(1e-5));
  }
  CHECK(seen.size() > 30);  // the loader was checked on most offset/flip combinations
  auto r0 = run(0, 2), r1 = run(1, 2);
  r0.insert(r1.begin(), r1.end());
  CHECK(r0 == one);  // the same sample gets the same pixels on 1 or 2 ranks
}
