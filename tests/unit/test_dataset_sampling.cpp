// The sampling rule of docs/dataset.md: coverage, reshuffling, determinism and world_size independence,
// eval coverage, resume, prefetch equivalence, normalisation and layout.
#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>
#include <set>

#include "io/dataset/dataset.hpp"
#include "base/error.hpp"

using namespace ht;

namespace {

LoaderOptions train_opts(int64_t B, int rank, int ws, uint64_t seed = 42, bool prefetch = true) {
  return {.global_batch = B, .rank = rank, .world_size = ws, .seed = seed, .prefetch = prefetch};
}

// Every batch's indices for one epoch of one rank.
std::vector<std::vector<int64_t>> epoch_batches(std::shared_ptr<Dataset> ds, LoaderOptions o, int epoch) {
  DataLoader dl(ds, o);
  dl.start_epoch(epoch);
  std::vector<std::vector<int64_t>> out;
  Batch b;
  while (dl.next(b)) {
    REQUIRE(b.epoch == epoch);
    REQUIRE(b.step == static_cast<int64_t>(out.size()));
    REQUIRE(b.labels.numel() == static_cast<int64_t>(b.indices.size()));
    out.push_back(b.indices);
  }
  REQUIRE(static_cast<int64_t>(out.size()) == dl.steps_per_epoch());
  return out;
}

// Global order of an epoch: step by step, rank by rank.
std::vector<int64_t> global_order(std::shared_ptr<Dataset> ds, int64_t B, int ws, int epoch, uint64_t seed = 42) {
  std::vector<std::vector<std::vector<int64_t>>> per_rank;
  for (int r = 0; r < ws; ++r) per_rank.push_back(epoch_batches(ds, train_opts(B, r, ws, seed), epoch));
  std::vector<int64_t> order;
  for (size_t s = 0; s < per_rank[0].size(); ++s)
    for (int r = 0; r < ws; ++r) {
      REQUIRE(static_cast<int64_t>(per_rank[r][s].size()) == B / ws);
      order.insert(order.end(), per_rank[r][s].begin(), per_rank[r][s].end());
    }
  return order;
}

}  // namespace

TEST_CASE("sampling: 20 samples, 2 ranks, 3 epochs", "[dataset][sampling]") {
  auto ds = make_synthetic_dataset(20, 4, 4, 1, 3, 7, "train");
  std::vector<int64_t> all(20);
  std::iota(all.begin(), all.end(), 0);
  std::vector<std::vector<int64_t>> orders;
  for (int e = 0; e < 3; ++e) {
    auto order = global_order(ds, 4, 2, e);
    REQUIRE(order.size() == 20);
    auto sorted = order;
    std::sort(sorted.begin(), sorted.end());
    CHECK(sorted == all);  // every sample exactly once across the ranks
    // each rank's part of a step is disjoint from the other's (implied by the above) and 2 per rank
    orders.push_back(order);
  }
  CHECK(orders[0] != orders[1]);  // reshuffled every epoch
  CHECK(orders[1] != orders[2]);
  CHECK(orders[0] != orders[2]);
  for (int e = 0; e < 3; ++e) CHECK(global_order(ds, 4, 2, e) == orders[e]);  // same seed repeats
  CHECK(global_order(ds, 4, 2, 0, 43) != orders[0]);                         // another seed differs
  // The loader follows epoch_permutation exactly.
  CHECK(orders[1] == epoch_permutation(20, 42, 1));
}

TEST_CASE("sampling: global batch membership is the same for world_size 1, 2, 4", "[dataset][sampling]") {
  auto ds = make_synthetic_dataset(20, 2, 2, 1, 2, 1, "train");
  for (int e = 0; e < 3; ++e) {
    auto o1 = global_order(ds, 4, 1, e);
    auto o2 = global_order(ds, 4, 2, e);
    auto o4 = global_order(ds, 4, 4, e);
    CHECK(o1 == o2);  // same members in the same order, so surely the same membership per step
    CHECK(o1 == o4);
  }
}

TEST_CASE("sampling: drop_last, limit, resume and prefetch", "[dataset][sampling]") {
  auto ds = make_synthetic_dataset(22, 3, 5, 2, 4, 3, "train");
  DataLoader dl(ds, train_opts(4, 0, 1));
  CHECK(dl.steps_per_epoch() == 5);  // floor(22/4): the last 2 of each permutation are dropped
  auto full = epoch_batches(ds, train_opts(4, 1, 2), 1);
  auto perm = epoch_permutation(22, 42, 1);
  for (size_t s = 0; s < full.size(); ++s)
    CHECK(full[s] == std::vector<int64_t>(perm.begin() + s * 4 + 2, perm.begin() + s * 4 + 4));

  // resume mid-epoch: the same batches as the uninterrupted epoch, and the same pixels
  DataLoader a(ds, train_opts(4, 1, 2, 42, true)), b(ds, train_opts(4, 1, 2, 42, false));
  a.start_epoch(1, 3);
  Batch x, y;
  REQUIRE(a.next(x));
  CHECK(x.step == 3);
  CHECK(x.indices == full[3]);
  b.start_epoch(1);
  for (int s = 0; s <= 3; ++s) REQUIRE(b.next(y));
  CHECK(y.indices == full[3]);
  REQUIRE(x.images.numel() == y.images.numel());
  CHECK(std::equal(x.images.data<float>(), x.images.data<float>() + x.images.numel(), y.images.data<float>()));
  CHECK(std::equal(x.labels.data<int32_t>(), x.labels.data<int32_t>() + 2, y.labels.data<int32_t>()));
  REQUIRE(a.next(x));
  CHECK_FALSE(a.next(x));
  // restarting an epoch while a prefetch is outstanding is safe and starts over
  a.start_epoch(2);
  REQUIRE(a.next(x));
  CHECK(x.indices == a.batch_indices(2, 0));

  LoaderOptions lim = train_opts(4, 0, 1);
  lim.limit = 9;
  DataLoader l(ds, lim);
  CHECK(l.steps_per_epoch() == 2);
  for (auto& bt : epoch_batches(ds, lim, 0))
    for (int64_t i : bt) CHECK(i < 9);

  CHECK_THROWS_AS(DataLoader(ds, train_opts(6, 0, 4)), UsageError);  // 4 does not divide 6
  CHECK_THROWS_AS(DataLoader(ds, train_opts(4, 2, 2)), UsageError);  // rank out of range
}

TEST_CASE("sampling: eval covers every sample once, contiguous per rank", "[dataset][sampling]") {
  auto ds = make_synthetic_dataset(21, 2, 2, 1, 2, 1, "test");
  std::vector<int64_t> seen;
  for (int r = 0; r < 3; ++r) {
    LoaderOptions o;
    o.train = false;
    o.rank = r;
    o.world_size = 3;
    o.eval_batch = 3;
    o.flip = true;
    o.crop_padding = 4;  // ignored in eval
    o.prefetch = r != 1;
    DataLoader dl(ds, o);
    CHECK(dl.steps_per_epoch() == 3);  // 7 samples per rank in batches of 3: 3, 3, 1
    dl.start_epoch(5);
    Batch b;
    std::vector<int64_t> mine;
    while (dl.next(b)) mine.insert(mine.end(), b.indices.begin(), b.indices.end());
    CHECK(b.labels.numel() == 1);  // short last batch
    for (size_t i = 1; i < mine.size(); ++i) CHECK(mine[i] == mine[i - 1] + 1);
    seen.insert(seen.end(), mine.begin(), mine.end());
  }
  std::vector<int64_t> all(21);
  std::iota(all.begin(), all.end(), 0);
  CHECK(seen == all);
}

TEST_CASE("loader: normalisation and NCHW/NHWC layout", "[dataset][sampling]") {
  const int H = 2, W = 3, C = 2;
  DatasetInfo info;
  info.height = H;
  info.width = W;
  info.channels = C;
  info.num_classes = 5;
  info.class_names = {"a", "b", "c", "d", "e"};
  info.mean = {0.25f, 0.5f};
  info.std = {0.5f, 0.125f};
  std::vector<uint8_t> img(4 * H * W * C);
  for (size_t i = 0; i < img.size(); ++i) img[i] = static_cast<uint8_t>(i * 5 + 1);
  std::vector<int32_t> lab = {4, 3, 2, 1};
  auto ds = make_memory_dataset(info, img, lab);
  for (Layout layout : {Layout::NCHW, Layout::NHWC}) {
    LoaderOptions o;
    o.train = false;
    o.eval_batch = 4;
    o.layout = layout;
    DataLoader dl(ds, o);
    Batch b;
    REQUIRE(dl.next(b));
    CHECK(b.images.shape() == (layout == Layout::NCHW ? std::vector<int64_t>{4, C, H, W} : std::vector<int64_t>{4, H, W, C}));
    CHECK(b.images.dtype() == DType::f32);
    CHECK(b.labels.dtype() == DType::i32);
    const float* f = b.images.data<float>();
    for (int n = 0; n < 4; ++n) {
      CHECK(b.labels.data<int32_t>()[n] == lab[n]);
      for (int y = 0; y < H; ++y)
        for (int x = 0; x < W; ++x)
          for (int c = 0; c < C; ++c) {
            double v = img[((n * H + y) * W + x) * C + c];
            double want = (v / 255.0 - info.mean[c]) / info.std[c];
            size_t at = layout == Layout::NCHW ? ((n * C + c) * H + y) * W + x : ((n * H + y) * W + x) * C + c;
            CHECK(f[at] == Approx(want).epsilon(1e-5).margin(1e-5));
          }
    }
  }
}

TEST_CASE("synthetic dataset is deterministic and learnable-shaped", "[dataset][sampling]") {
  auto a = make_synthetic_dataset(50, 4, 3, 2, 5, 9, "train");
  auto b = make_synthetic_dataset(50, 4, 3, 2, 5, 9, "train");
  auto t = make_synthetic_dataset(50, 4, 3, 2, 5, 9, "test");
  std::vector<int64_t> idx = {0, 7, 49, 7};
  std::vector<uint8_t> ia(4 * 24), ib(4 * 24), it(4 * 24);
  std::vector<int32_t> la(4), lb(4), lt(4);
  a->read(idx, ia, la);
  b->read(idx, ib, lb);
  t->read(idx, it, lt);
  CHECK(ia == ib);
  CHECK(la == lb);
  CHECK(std::equal(ia.begin() + 24, ia.begin() + 48, ia.begin() + 72));  // index 7 twice
  CHECK(ia != it);
  for (int32_t l : la) CHECK((l >= 0 && l < 5));
  CHECK(a->info().mean.size() == 2);
  CHECK(a->info().std[0] > 0.f);
  // Two samples of the same class are closer to each other than to other classes on average:
  // the class template dominates the noise.
  std::vector<int64_t> all(50);
  std::iota(all.begin(), all.end(), 0);
  std::vector<uint8_t> px(50 * 24);
  std::vector<int32_t> lab(50);
  a->read(all, px, lab);
  double same = 0, diff = 0;
  int ns = 0, nd = 0;
  for (int i = 0; i < 50; ++i)
    for (int j = i + 1; j < 50; ++j) {
      double d = 0;
      for (int p = 0; p < 24; ++p) d += std::abs(px[i * 24 + p] - px[j * 24 + p]);
      (lab[i] == lab[j] ? (same += d, ns++) : (diff += d, nd++));
    }
  REQUIRE(ns > 0);
  CHECK(same / ns < 0.75 * (diff / nd));
}

namespace {
// Fails on one sample, to check that errors on the prefetch thread reach the caller.
class FailingDataset final : public Dataset {
 public:
  FailingDataset() : inner_(make_synthetic_dataset(16, 2, 2, 1, 2, 1, "train")) {}
  const DatasetInfo& info() const override { return inner_->info(); }
  void read(std::span<const int64_t> idx, std::span<uint8_t> images, std::span<int32_t> labels) override {
    for (int64_t i : idx)
      if (i == 5) throw RuntimeError("disk on fire at sample 5");
    inner_->read(idx, images, labels);
  }

 private:
  std::shared_ptr<Dataset> inner_;
};
}  // namespace

TEST_CASE("loader: a read error on the prefetch thread is rethrown by next()", "[dataset][sampling]") {
  for (bool prefetch : {true, false}) {
    LoaderOptions o;
    o.train = false;
    o.eval_batch = 4;
    o.prefetch = prefetch;
    DataLoader dl(std::make_shared<FailingDataset>(), o);
    Batch b;
    REQUIRE(dl.next(b));  // samples 0..3
    CHECK_THROWS_WITH(dl.next(b), Catch::Contains("sample 5"));
  }
}
