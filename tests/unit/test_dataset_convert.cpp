// Converter round trips (Fashion-MNIST IDX gz/plain, CIFAR-10 binary) and input validation.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>
#include <functional>
#include <unistd.h>

#include "io/dataset/cifar.hpp"
#include "io/dataset/dataset.hpp"
#include "io/dataset/dataset_h5.hpp"
#include "io/dataset/dataset_prepare.hpp"
#include "io/dataset/idx.hpp"
#include "base/error.hpp"

namespace fs = std::filesystem;
using namespace ht;

namespace {

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag) {
    path = fs::temp_directory_path() / ("ht_test_" + tag + "_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string operator/(const std::string& f) const { return (path / f).string(); }
};

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed, int mod = 256) {
  std::mt19937 g(seed);
  std::vector<uint8_t> v(n);
  for (auto& x : v) x = static_cast<uint8_t>(g() % mod);
  return v;
}

// Reads every sample back, in a scrambled order to exercise the reader's scatter.
void read_all(Dataset& ds, std::vector<uint8_t>& images, std::vector<int32_t>& labels) {
  const auto& i = ds.info();
  const size_t sample = static_cast<size_t>(i.height) * i.width * i.channels;
  std::vector<int64_t> idx(static_cast<size_t>(i.num_samples));
  for (size_t k = 0; k < idx.size(); ++k) idx[k] = static_cast<int64_t>((idx.size() - 1 - k + 2) % idx.size());  // reversed, rotated
  std::vector<uint8_t> img(idx.size() * sample);
  std::vector<int32_t> lab(idx.size());
  ds.read(idx, img, lab);
  images.assign(idx.size() * sample, 0);
  labels.assign(idx.size(), -1);
  for (size_t k = 0; k < idx.size(); ++k) {
    std::copy_n(img.data() + k * sample, sample, images.data() + static_cast<size_t>(idx[k]) * sample);
    labels[static_cast<size_t>(idx[k])] = lab[k];
  }
}

void check_mean_std(const DatasetInfo& info, const std::vector<uint8_t>& train) {
  const int C = info.channels;
  for (int c = 0; c < C; ++c) {
    double s = 0, s2 = 0, n = 0;
    for (size_t i = c; i < train.size(); i += C) {
      double x = train[i] / 255.0;
      s += x;
      s2 += x * x;
      n += 1;
    }
    double m = s / n;
    CHECK(info.mean[c] == Approx(m).epsilon(1e-6));
    CHECK(info.std[c] == Approx(std::sqrt(s2 / n - m * m)).epsilon(1e-5));
  }
}

void check_shard_sizes(const std::string& dir, const std::string& split, int shards, int64_t n) {
  for (int k = 0; k < shards; ++k) {
    auto ds = open_dataset_shard(dir + "/" + shard_file_name(split, k, shards));
    CHECK(ds->info().num_samples == n * (k + 1) / shards - n * k / shards);
  }
}

}  // namespace

TEST_CASE("prepare fashion-mnist: IDX (gzipped and plain) round trip is byte-exact", "[dataset][convert]") {
  for (bool gz : {true, false}) {
    DYNAMIC_SECTION("gzip " << gz) {
      TempDir in("fm_in"), out("fm_out");
      const int64_t ntr = 23, nte = 7;  // 23 train samples in 4 shards: 5, 6, 6, 6
      auto tri = random_bytes(ntr * 28 * 28, 1), tei = random_bytes(nte * 28 * 28, 2);
      auto trl = random_bytes(ntr, 3, 10), tel = random_bytes(nte, 4, 10);
      std::string sfx = gz ? ".gz" : "";
      write_idx_u8(in / ("train-images-idx3-ubyte" + sfx), {ntr, 28, 28}, tri, gz);
      write_idx_u8(in / ("train-labels-idx1-ubyte" + sfx), {ntr}, trl, gz);
      write_idx_u8(in / ("t10k-images-idx3-ubyte" + sfx), {nte, 28, 28}, tei, gz);
      write_idx_u8(in / ("t10k-labels-idx1-ubyte" + sfx), {nte}, tel, gz);
      if (gz) {  // really compressed: the first bytes are the gzip magic
        std::ifstream f(in / "train-images-idx3-ubyte.gz", std::ios::binary);
        CHECK(f.get() == 0x1f);
        CHECK(f.get() == 0x8b);
      }
      PrepareOptions o;
      o.format = "fashion-mnist";
      o.input = in.path.string();
      o.output = out.path.string();
      o.shards = 4;
      PrepareResult r = prepare_dataset(o);
      CHECK(r.train_samples == ntr);
      CHECK(r.test_samples == nte);
      CHECK(fs::exists(out / "test-00000-of-00001.h5"));
      check_shard_sizes(out.path.string(), "train", 4, ntr);

      auto train = open_sharded_dataset(out.path.string(), "train");
      auto test = open_sharded_dataset(out.path.string(), "test");
      const DatasetInfo& info = train->info();
      CHECK(info.num_samples == ntr);
      CHECK(info.height == 28);
      CHECK(info.width == 28);
      CHECK(info.channels == 1);
      CHECK(info.num_classes == 10);
      REQUIRE(info.class_names.size() == 10);
      CHECK(info.class_names[0] == "T-shirt/top");
      CHECK(info.class_names[9] == "Ankle boot");
      check_mean_std(info, tri);
      CHECK(test->info().mean == info.mean);  // test shards carry the train statistics

      std::vector<uint8_t> img;
      std::vector<int32_t> lab;
      read_all(*train, img, lab);
      CHECK(img == tri);
      CHECK(lab == std::vector<int32_t>(trl.begin(), trl.end()));
      read_all(*test, img, lab);
      CHECK(img == tei);
      CHECK(lab == std::vector<int32_t>(tel.begin(), tel.end()));
    }
  }
}

TEST_CASE("prepare cifar10: CHW records become NHWC, byte-exact, uneven shards", "[dataset][convert]") {
  TempDir in("cf_in"), out("cf_out");
  const int counts[5] = {3, 4, 2, 5, 3};  // 17 train samples into 3 shards: 5, 6, 6
  std::vector<uint8_t> all_rec;
  uint32_t seed = 10;
  auto write_batch = [&](const std::string& name, int n, std::vector<uint8_t>& recs) {
    auto bytes = random_bytes(static_cast<size_t>(n) * kCifarRecord, seed++);
    for (int i = 0; i < n; ++i) bytes[static_cast<size_t>(i) * kCifarRecord] %= 10;
    std::ofstream(in / name, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    recs.insert(recs.end(), bytes.begin(), bytes.end());
  };
  std::vector<uint8_t> train_rec, test_rec;
  for (int b = 0; b < 5; ++b) write_batch("data_batch_" + std::to_string(b + 1) + ".bin", counts[b], train_rec);
  write_batch("test_batch.bin", 4, test_rec);
  // Reference conversion written independently: NHWC[i][y][x][c] = record i byte 1 + c*1024 + y*32 + x.
  auto reference = [](const std::vector<uint8_t>& rec, std::vector<uint8_t>& img, std::vector<int32_t>& lab) {
    int64_t n = static_cast<int64_t>(rec.size()) / 3073;
    img.assign(static_cast<size_t>(n) * 3072, 0);
    lab.clear();
    for (int64_t i = 0; i < n; ++i) {
      lab.push_back(rec[static_cast<size_t>(i) * 3073]);
      for (int y = 0; y < 32; ++y)
        for (int x = 0; x < 32; ++x)
          for (int c = 0; c < 3; ++c)
            img[static_cast<size_t>(((i * 32 + y) * 32 + x) * 3 + c)] = rec[static_cast<size_t>(i * 3073 + 1 + c * 1024 + y * 32 + x)];
    }
  };
  std::vector<uint8_t> ref_img, ref_test_img, img;
  std::vector<int32_t> ref_lab, ref_test_lab, lab;
  reference(train_rec, ref_img, ref_lab);
  reference(test_rec, ref_test_img, ref_test_lab);

  PrepareOptions o;
  o.format = "cifar10";
  o.input = in.path.string();
  o.output = out.path.string();
  o.shards = 3;
  o.test_shards = 3;  // 4 test samples in 3 shards: 1, 1, 2
  PrepareResult r = prepare_dataset(o);
  CHECK(r.train_samples == 17);
  CHECK(r.test_samples == 4);
  check_shard_sizes(out.path.string(), "train", 3, 17);
  check_shard_sizes(out.path.string(), "test", 3, 4);
  auto train = open_sharded_dataset(out.path.string(), "train");
  const DatasetInfo& info = train->info();
  CHECK(info.height == 32);
  CHECK(info.width == 32);
  CHECK(info.channels == 3);
  CHECK(info.class_names == cifar10_classes());
  check_mean_std(info, ref_img);
  read_all(*train, img, lab);
  CHECK(img == ref_img);
  CHECK(lab == ref_lab);
  read_all(*open_sharded_dataset(out.path.string(), "test"), img, lab);
  CHECK(img == ref_test_img);
  CHECK(lab == ref_test_lab);

  // The HDF5 hyperslab path (used for compressed shards, or forced) reads the same bytes as the
  // direct pread path.
  setenv("HT_DATASET_HDF5_READS", "1", 1);
  auto via_h5 = open_sharded_dataset(out.path.string(), "train");
  unsetenv("HT_DATASET_HDF5_READS");
  read_all(*via_h5, img, lab);
  CHECK(img == ref_img);
  CHECK(lab == ref_lab);
  // Concurrent readers on one dataset (both paths) get the right bytes: Dataset::read is thread-safe.
  for (bool hdf5 : {false, true}) {
    if (hdf5) setenv("HT_DATASET_HDF5_READS", "1", 1);
    auto shared = open_sharded_dataset(out.path.string(), "train");
    unsetenv("HT_DATASET_HDF5_READS");
    std::vector<int> bad(4, 0);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&, t] {
        std::vector<uint8_t> b(3 * 3072);
        std::vector<int32_t> l(3);
        for (int rep = 0; rep < 200; ++rep) {
          std::vector<int64_t> idx = {(rep + t) % 17, (rep * 5 + 3) % 17, (rep * 11 + t * 7) % 17};
          shared->read(idx, b, l);
          for (int k = 0; k < 3; ++k)
            bad[t] += !std::equal(b.begin() + k * 3072, b.begin() + (k + 1) * 3072, ref_img.begin() + idx[k] * 3072) ||
                      l[k] != ref_lab[static_cast<size_t>(idx[k])];
        }
      });
    for (auto& th : threads) th.join();
    CHECK(bad == std::vector<int>(4, 0));
  }
  o.gzip = 4;
  prepare_dataset(o);
  read_all(*open_sharded_dataset(out.path.string(), "train"), img, lab);
  CHECK(img == ref_img);
  o.gzip = 0;

  // Re-preparing with another shard count replaces the old set instead of mixing with it.
  o.shards = 2;
  prepare_dataset(o);
  CHECK(open_sharded_dataset(out.path.string(), "train")->info().num_samples == 17);
  CHECK_FALSE(fs::exists(out / "train-00000-of-00003.h5"));
}

namespace {
std::string usage_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no UsageError)";
}
}  // namespace

TEST_CASE("prepare: invalid input names the file and the problem", "[dataset][convert]") {
  TempDir in("bad_in"), out("bad_out");
  std::vector<uint8_t> img(5 * 28 * 28, 1), lab(5, 1);
  write_idx_u8(in / "train-images-idx3-ubyte", {5, 28, 28}, img, false);
  write_idx_u8(in / "train-labels-idx1-ubyte", {5}, lab, false);
  write_idx_u8(in / "t10k-images-idx3-ubyte", {5, 28, 28}, img, false);
  write_idx_u8(in / "t10k-labels-idx1-ubyte", {4}, std::vector<uint8_t>(4, 1), false);
  PrepareOptions o{"fashion-mnist", in.path.string(), out.path.string()};
  std::string m = usage_error([&] { prepare_dataset(o); });
  CHECK_THAT(m, Catch::Contains("t10k-labels-idx1-ubyte") && Catch::Contains("4 labels"));

  // bad magic
  std::ofstream(in / "t10k-labels-idx1-ubyte", std::ios::binary) << "PK\x03\x04garbage";
  m = usage_error([&] { read_idx_u8(in / "t10k-labels-idx1-ubyte", 1); });
  CHECK_THAT(m, Catch::Contains("t10k-labels-idx1-ubyte") && Catch::Contains("magic"));
  // truncated data
  {
    std::vector<uint8_t> b = {0, 0, 8, 1, 0, 0, 0, 10, 1, 2, 3};
    std::ofstream(in / "short", std::ios::binary).write(reinterpret_cast<const char*>(b.data()), 11);
  }
  m = usage_error([&] { read_idx_u8(in / "short", 1); });
  CHECK_THAT(m, Catch::Contains("short") && Catch::Contains("truncated") && Catch::Contains("3 of 10"));
  // wrong dimension count
  m = usage_error([&] { read_idx_u8(in / "train-labels-idx1-ubyte", 3); });
  CHECK_THAT(m, Catch::Contains("train-labels-idx1-ubyte") && Catch::Contains("1 dimensions"));
  // label >= 10
  write_idx_u8(in / "t10k-labels-idx1-ubyte", {5}, std::vector<uint8_t>{1, 2, 3, 10, 4}, false);
  m = usage_error([&] { prepare_dataset(o); });
  CHECK_THAT(m, Catch::Contains("t10k-labels-idx1-ubyte") && Catch::Contains("label 3 = 10"));
  // missing input
  o.input = (in.path / "nowhere").string();
  CHECK_THAT(usage_error([&] { prepare_dataset(o); }), Catch::Contains("nowhere"));

  // CIFAR-10: size not a multiple of the record, label out of range
  std::vector<uint8_t> rec(3073 * 2 + 5, 0);
  std::ofstream(in / "c.bin", std::ios::binary).write(reinterpret_cast<const char*>(rec.data()), static_cast<std::streamsize>(rec.size()));
  std::vector<uint8_t> ci;
  std::vector<int32_t> cl;
  CHECK_THAT(usage_error([&] { read_cifar10_batch(in / "c.bin", ci, cl); }),
             Catch::Contains("c.bin") && Catch::Contains("6151 bytes"));
  rec.resize(3073 * 2);
  rec[3073] = 11;
  std::ofstream(in / "c.bin", std::ios::binary).write(reinterpret_cast<const char*>(rec.data()), static_cast<std::streamsize>(rec.size()));
  CHECK_THAT(usage_error([&] { read_cifar10_batch(in / "c.bin", ci, cl); }),
             Catch::Contains("c.bin") && Catch::Contains("record 1 has label 11"));
}

TEST_CASE("reader: shard set problems name the file", "[dataset][convert]") {
  TempDir d("set");
  DatasetInfo info;
  info.height = 2;
  info.width = 3;
  info.channels = 1;
  info.num_classes = 2;
  info.class_names = {"a", "b"};
  info.mean = {0.5f};
  info.std = {0.25f};
  std::vector<uint8_t> img(4 * 6, 7);
  std::vector<int32_t> lab = {0, 1, 1, 0};
  write_sharded_split(d.path.string(), "train", info, img, lab, 2);
  CHECK(open_sharded_dataset(d.path.string(), "train")->info().num_samples == 4);
  // a missing shard
  fs::remove(d / "train-00001-of-00002.h5");
  CHECK_THAT(usage_error([&] { open_sharded_dataset(d.path.string(), "train"); }),
             Catch::Contains("train-00001-of-00002.h5") && Catch::Contains("missing"));
  // a shard whose attributes disagree with its name
  fs::copy_file(d / "train-00000-of-00002.h5", d / "train-00001-of-00002.h5");
  CHECK_THAT(usage_error([&] { open_sharded_dataset(d.path.string(), "train"); }),
             Catch::Contains("train-00001-of-00002.h5") && Catch::Contains("shard_index"));
  // no shards at all
  CHECK_THAT(usage_error([&] { open_sharded_dataset(d.path.string(), "test"); }), Catch::Contains("no test shards"));
  // reading out of range
  auto ds = open_dataset_shard(d / "train-00000-of-00002.h5");
  std::vector<int64_t> idx = {2};
  std::vector<uint8_t> b(6);
  std::vector<int32_t> l(1);
  CHECK_THROWS_AS(ds->read(idx, b, l), UsageError);
}
