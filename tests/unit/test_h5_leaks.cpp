// No HDF5 identifier outlives a failed read: every reader (checkpoint, shard, sharded directory,
// resume scan) is run over a set of bad files, and after each the count of open HDF5 objects
// (H5Fget_obj_count(H5F_OBJ_ALL): files, groups, datasets, named types, attributes) is back to zero.
// Only mutations that cannot crash HDF5 in-process are used here (checkpoints have metadata
// checksums; shards are truncated or replaced); the crashing ones are tests/verify/test_vetting.py's.
#include <hdf5.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <random>

#include "io/checkpoint/checkpoint_format.hpp"
#include "io/checkpoint/checkpoint_store.hpp"
#include "io/dataset/dataset.hpp"
#include "io/dataset/dataset_h5.hpp"
#include "io/h5.hpp"
#include "base/error.hpp"

#include "tests/unit/temp_dir_util.hpp"

namespace fs = std::filesystem;
using namespace ht;

namespace {

fs::path fresh_dir(const std::string& name) { return test::fresh_temp_dir("ht_h5leak", name); }


// Identifiers of every kind HDF5 hands out (H5Inmembers), so that a leaked dataspace, datatype or
// property list counts too (H5Fget_obj_count sees only files, groups, datasets, named types and
// attributes). None leaks; the "infinite loop closing library" HDF5 1.10 prints when this binary
// exits after the 135 bad files comes from its own free lists (H5FL), not from an identifier of ours.
std::string id_counts() {
  std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
  std::string out;
  for (H5I_type_t t : {H5I_FILE, H5I_GROUP, H5I_DATATYPE, H5I_DATASPACE, H5I_DATASET, H5I_ATTR, H5I_GENPROP_LST}) {
    hsize_t n = 0;
    H5Inmembers(t, &n);
    out += std::to_string(static_cast<int>(t)) + ":" + std::to_string(n) + " ";
  }
  return out;
}

ssize_t open_objects() {
  std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
  return H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
}

// Runs `read`, which may throw (a rejection), and returns whether it threw.
template <class F> bool rejected(F&& read) {
  try {
    read();
    return false;
  } catch (const std::exception&) {
    return true;
  }
}

// Bad variants of `good`: truncated at 12 lengths, 120 single-bit flips at random offsets, an empty
// file, text, the first kilobyte only repeated.
std::vector<std::string> bad_variants(const std::string& good, uint32_t seed) {
  std::vector<std::string> v;
  for (int k = 1; k <= 12; ++k) v.push_back(good.substr(0, good.size() * static_cast<size_t>(k) / 13));
  std::mt19937 rng(seed);
  for (int i = 0; i < 120; ++i) {
    std::string b = good;
    size_t off = std::uniform_int_distribution<size_t>(0, b.size() - 1)(rng);
    b[off] = static_cast<char>(b[off] ^ (1 << (i % 8)));
    v.push_back(b);
  }
  v.push_back("");
  v.push_back("not an HDF5 file\n");
  v.push_back(good.substr(0, 1024) + good.substr(0, 1024));
  return v;
}

}  // namespace

TEST_CASE("h5 leaks: every checkpoint reader closes every identifier after each failure", "[h5][checkpoint]") {
  auto dir = fresh_dir("ckpt");
  CheckpointData d;
  Tensor w = Tensor::empty({10, 40});
  for (auto& x : w.span<float>()) x = 0.5f;
  d.tensors.emplace_back("param/fc.weight", w);
  d.tensors.emplace_back("param/conv1.weight", Tensor::empty({8, 3, 3, 3}));
  d.ints = {{"step", 3}, {"epoch", 1}, {"step_in_epoch", 3}, {"world_size", 1}};
  d.strings = {{"model", "fmnist_cnn"}, {"config", "[run]\nseed = 1\n"}};
  const fs::path run = dir / "run";
  fs::create_directories(run / "checkpoints");
  const fs::path file = run / "checkpoints" / "step-00000003.h5";
  write_checkpoint_file(file.string(), d);
  const std::string good = test::file_bytes(file);
  REQUIRE(open_objects() == 0);
  const std::string ids0 = id_counts();
  int n_rejected = 0;
  size_t i = 0;
  for (const std::string& bad : bad_variants(good, 77)) {
    INFO("variant " << i++ << " (" << bad.size() << " bytes)");
    test::write_file_bytes(file, bad);
    n_rejected += rejected([&] { read_checkpoint_file(file.string()); });
    REQUIRE(open_objects() == 0);
    REQUIRE(id_counts() == ids0);
    is_checkpoint_file(file.string());
    REQUIRE(open_objects() == 0);
    fs::remove(file.string() + ".bad");
    load_latest_checkpoint(run.string(), false, nullptr);
    REQUIRE(open_objects() == 0);
  }
  CHECK(n_rejected > 100);
  fs::remove_all(dir);
}

TEST_CASE("h5 leaks: the shard readers close every identifier after each failure", "[h5][dataset]") {
  auto dir = fresh_dir("shard");
  DatasetInfo info;
  info.height = 4;
  info.width = 4;
  info.channels = 1;
  info.num_classes = 3;
  info.class_names = {"a", "b", "c"};
  info.mean = {0.5f};
  info.std = {0.25f};
  info.source = "test";
  const int n = 40;
  std::vector<uint8_t> images(static_cast<size_t>(n) * 16);
  std::vector<int32_t> labels(static_cast<size_t>(n));
  for (size_t k = 0; k < images.size(); ++k) images[k] = static_cast<uint8_t>(k * 7);
  for (int k = 0; k < n; ++k) labels[static_cast<size_t>(k)] = k % 3;
  const fs::path file = dir / "train-00000-of-00001.h5";
  write_dataset_shard(file.string(), info, "train", 0, 1, images, labels);
  const std::string good = test::file_bytes(file);
  REQUIRE(open_objects() == 0);
  {
    auto ds = open_dataset_shard(file.string());
    REQUIRE(ds->info().num_samples == n);
  }
  REQUIRE(open_objects() == 0);
  // Shards have no metadata checksums, so only changes HDF5 survives in-process: truncations and
  // replacements (bit flips can crash HDF5 itself, which is why files are vetted in a child).
  std::vector<std::string> variants;
  for (int k = 1; k <= 12; ++k) variants.push_back(good.substr(0, good.size() * static_cast<size_t>(k) / 13));
  variants.push_back("");
  variants.push_back("not an HDF5 file\n");
  int n_rejected = 0;
  size_t i = 0;
  for (const std::string& bad : variants) {
    INFO("variant " << i++ << " (" << bad.size() << " bytes)");
    test::write_file_bytes(file, bad);
    n_rejected += rejected([&] { open_dataset_shard(file.string()); });
    REQUIRE(open_objects() == 0);
    n_rejected += rejected([&] { open_sharded_dataset(dir.string(), "train"); });
    REQUIRE(open_objects() == 0);
  }
  CHECK(n_rejected == 2 * static_cast<int>(variants.size()));
  fs::remove_all(dir);
}
