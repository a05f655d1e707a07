// Checkpoint validation before use: counters in range and in agreement, declared sizes checked
// against the stored bytes before any allocation, and the caller's layout check (split from
// test_checkpoint.cpp).
#include <hdf5.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "io/checkpoint/checkpoint_store.hpp"
#include "io/checkpoint/checkpoint_writer.hpp"
#include "io/fletcher32.hpp"
#include "base/test_faults.hpp"
#include "src/cli/commands.hpp"
#include "src/train/signals.hpp"

#include "tests/unit/checkpoint_test_util.hpp"
#include "tests/unit/temp_dir_util.hpp"

namespace fs = std::filesystem;
using namespace ht;
using test::fresh_dir;
using test::sample_data;

namespace {

// A consistent layout: step 12 = epoch 1 x 8 steps + 4, one parameter with its momentum.
CheckpointLayout good_layout() {
  CheckpointLayout l;
  l.version = 1;
  l.tensors = {{"param/w", {4, 3}}, {"buffer/bn.running_mean", {4}}, {"momentum/w", {4, 3}}};
  l.ints = {{"step", 12}, {"epoch", 1}, {"step_in_epoch", 4}, {"steps_per_epoch", 8}, {"total_steps", 16},
            {"nonfinite_in_row", 0}, {"nonfinite_total", 0}, {"world_size", 2}, {"global_batch", 32},
            {"seed", 42}, {"epoch_offset", 0}};
  l.floats = {{"lr", 0.01}, {"loss_scale", 1.0}};
  l.strings = {{"model", "m"}};
  return l;
}

// The problem `l` gets with ints[key] = value (checked as a run directory's step-00000012.h5).
std::string with_int(const std::string& key, int64_t value) {
  CheckpointLayout l = good_layout();
  l.ints[key] = value;
  return checkpoint_layout_problem(l, "/run/checkpoints/step-00000012.h5");
}

// Replaces dataset `name` of the checkpoint at `path` by an unwritten float32 dataset of shape
// `dims` (chunks `chunk`, fletcher32): HDF5 stores no chunk of it.
void replace_unwritten(const std::string& path, const std::string& name, std::vector<hsize_t> dims,
                       std::vector<hsize_t> chunk) {
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  REQUIRE(f >= 0);
  REQUIRE(H5Ldelete(f, name.c_str(), H5P_DEFAULT) >= 0);
  hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data());
  H5Pset_fletcher32(dcpl);
  hid_t ds = H5Dcreate2(f, name.c_str(), H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  REQUIRE(ds >= 0);
  H5Dclose(ds);
  H5Pclose(dcpl);
  H5Sclose(space);
  H5Fclose(f);
}

std::string read_error(const std::string& path, const CheckpointCheck& check = {}) {
  try {
    read_checkpoint_file(path, check);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("checkpoint counters: in range and in agreement, or the problem names field and value", "[checkpoint]") {
  const std::string name = "/run/checkpoints/step-00000012.h5";
  CHECK(checkpoint_layout_problem(good_layout(), name).empty());
  CHECK(checkpoint_layout_problem(good_layout(), "/elsewhere/init.h5").empty());
  CHECK(with_int("step_in_epoch", 1000000000) ==
        "ints/step_in_epoch = 1000000000 is beyond ints/steps_per_epoch = 8");
  CHECK(with_int("epoch", -1) == "ints/epoch = -1 is outside [0, 2147483646]");
  CHECK(with_int("epoch", 1000000).find("epoch = 1000000") != std::string::npos);
  CHECK(with_int("epoch", int64_t(1) << 40) == "ints/epoch = 1099511627776 is outside [0, 2147483646]");
  CHECK(with_int("epoch", 0).find("progress counters disagree: ints/step = 12") == 0);  // off by one
  CHECK(with_int("step_in_epoch", 3).find("step_in_epoch = 3") != std::string::npos);
  CHECK(with_int("step_in_epoch", -1) == "ints/step_in_epoch = -1 is outside [0, 9223372036854775807]");
  CHECK(with_int("steps_per_epoch", 0) == "ints/steps_per_epoch = 0 is outside [1, 9223372036854775807]");
  CHECK(with_int("total_steps", 5) == "ints/step = 12 is beyond ints/total_steps = 5");
  CHECK(with_int("step", 13) == "ints/step = 13 does not match the file name (step 12)");
  CHECK(with_int("nonfinite_total", -1).find("ints/nonfinite_total = -1") == 0);
  CHECK(with_int("nonfinite_in_row", 1) == "ints/nonfinite_in_row = 1 is more than ints/nonfinite_total = 0");
  CHECK(with_int("world_size", 3) == "ints/global_batch = 32 is not a multiple of ints/world_size = 3");
  CHECK(with_int("world_size", int64_t(1) << 40).find("ints/world_size = 1099511627776") == 0);
  CHECK(with_int("epoch_offset", 1).find("epoch_offset = 1") != std::string::npos);
  // Overflowing arithmetic is a disagreement, not a wrap-around.
  CHECK(with_int("nonfinite_total", INT64_MAX).find("overflows") != std::string::npos);
  {
    CheckpointLayout l = good_layout();
    l.ints["epoch"] = 2147483646;
    l.ints["steps_per_epoch"] = INT64_MAX / 2;
    l.ints["step_in_epoch"] = 0;
    CHECK(checkpoint_layout_problem(l, "x.h5").find("progress counters disagree") == 0);
  }
  // Skipped steps count in the epoch: 10 applied + 2 skipped = 12 = 1 x 8 + 4.
  {
    CheckpointLayout l = good_layout();
    l.ints["step"] = 10;
    l.ints["total_steps"] = 16;
    l.ints["nonfinite_total"] = 2;
    l.ints["nonfinite_in_row"] = 1;
    CHECK(checkpoint_layout_problem(l, "x.h5").empty());
  }
  // A file of an earlier build has no epoch_offset: the weaker rule (each epoch holds a step).
  {
    CheckpointLayout l = good_layout();
    l.ints.erase("epoch_offset");
    CHECK(checkpoint_layout_problem(l, name).empty());
    l.ints["epoch"] = 9;
    CHECK(checkpoint_layout_problem(l, name).find("progress counters disagree") == 0);
  }
  // A run directory's checkpoint needs every resume field and a momentum per parameter; an
  // --init-from file (another name) does not.
  {
    CheckpointLayout l = good_layout();
    l.ints.erase("steps_per_epoch");
    CHECK(checkpoint_layout_problem(l, name) == "dataset /ints/steps_per_epoch is missing (a resume needs it)");
    CHECK(checkpoint_layout_problem(l, "init.h5").empty());
    l = good_layout();
    l.tensors.pop_back();
    CHECK(checkpoint_layout_problem(l, name) == "dataset /momentum/w is missing (/param/w has shape [4, 3])");
    l.tensors.push_back({"momentum/w", {12}});
    CHECK(checkpoint_layout_problem(l, name) == "dataset /momentum/w has shape [12], /param/w has [4, 3]");
    l = good_layout();
    l.tensors.push_back({"param/w", {4, 3}});
    CHECK(checkpoint_layout_problem(l, name) == "/meta/tensor_names lists /param/w twice");
  }
  CheckpointLayout l = good_layout();
  l.floats["lr"] = NAN;
  CHECK(checkpoint_layout_problem(l, name).find("floats/lr = nan") == 0);
  l = good_layout();
  l.floats["loss_scale"] = 0;
  CHECK(checkpoint_layout_problem(l, name).find("floats/loss_scale = 0") == 0);
}

TEST_CASE("checkpoint: declared sizes are checked against the stored bytes before any allocation",
          "[checkpoint]") {
  auto dir = fresh_dir("declared");
  const std::string good = (dir / "good.h5").string();
  write_checkpoint_file(good, sample_data(12));
  REQUIRE(read_error(good).empty());
  struct Case {
    std::vector<hsize_t> dims, chunk;
    std::vector<std::string> expect;
  };
  const std::vector<Case> cases = {
      {{hsize_t(1) << 32, hsize_t(1) << 32}, {1024, 1024}, {"/param/fc.weight", "[4294967296, 4294967296]", "overflows"}},
      {{hsize_t(1) << 31}, {hsize_t(1) << 18}, {"/param/fc.weight", "[2147483648]", "no stored data"}},
      {{10, 300}, {10, 300}, {"/param/fc.weight", "[10, 300]", "no stored data"}},
      {{1, 1, 1, 1, 1, 1, 1, 1, 3000}, {1, 1, 1, 1, 1, 1, 1, 1, 3000}, {"/param/fc.weight", "9 dimensions"}},
  };
  for (const auto& c : cases) {
    const std::string bad = (dir / "bad.h5").string();
    fs::copy_file(good, bad, fs::copy_options::overwrite_existing);
    replace_unwritten(bad, "param/fc.weight", c.dims, c.chunk);
    const std::string e = read_error(bad);
    INFO(e);
    CHECK(e.find("checkpoint " + bad + " is invalid: ") == 0);
    for (const auto& x : c.expect) CHECK(e.find(x) != std::string::npos);
    CHECK(inspect_checkpoint(bad) == kExitUsage);  // the same verdict
  }
  // Values: every one finite, running variances >= 0 (checked as the data is read).
  for (auto [tensor, value] : {std::pair<const char*, float>{"param/fc.bias", NAN}, {"buffer/bn1.running_mean", INFINITY}}) {
    CheckpointData d = sample_data(12);
    for (auto& [n, t] : d.tensors)
      if (n == tensor) t.data<float>()[3] = value;
    const std::string bad = (dir / "values.h5").string();
    write_checkpoint_file(bad, d);
    const std::string e = read_error(bad);
    CHECK(e.find(std::string("dataset /") + tensor + " element 3 = ") != std::string::npos);
    CHECK(inspect_checkpoint(bad) == kExitUsage);
  }
  {
    CheckpointData d = sample_data(12);
    d.tensors.emplace_back("buffer/bn1.running_var", test::filled({8}, -0.5f));
    const std::string bad = (dir / "var.h5").string();
    write_checkpoint_file(bad, d);
    CHECK(read_error(bad).find("dataset /buffer/bn1.running_var element 0 = -0.5") != std::string::npos);
  }
  // Root attributes: `version` as 1000 integers (read into one int64 before) and `format` declaring a
  // 1 GiB string are rejected before the read.
  {
    const std::string bad = (dir / "attrs.h5").string();
    fs::copy_file(good, bad, fs::copy_options::overwrite_existing);
    hid_t f = H5Fopen(bad.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    REQUIRE(H5Adelete(f, "version") >= 0);
    hsize_t n = 1000;
    hid_t space = H5Screate_simple(1, &n, nullptr);
    hid_t a = H5Acreate2(f, "version", H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
    std::vector<int64_t> ones(n, 1);
    H5Awrite(a, H5T_NATIVE_INT64, ones.data());
    H5Aclose(a);
    H5Sclose(space);
    H5Fclose(f);
    CHECK(read_error(bad).find("attribute version is not one integer") != std::string::npos);
  }
  // No HDF5 identifier is left open by any of these failures.
  CHECK(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL) == 0);
  fs::remove_all(dir);
}

TEST_CASE("checkpoint: the caller's check sees the layout before the data; a refusal passes through",
          "[checkpoint]") {
  auto dir = fresh_dir("caller_check");
  const std::string path = (dir / "a.h5").string();
  write_checkpoint_file(path, sample_data(12));
  std::vector<std::string> seen;
  const std::string e = read_error(path, [&](const CheckpointLayout& l, const std::string& p) {
    for (const auto& t : l.tensors) seen.push_back(t.name);
    CHECK(p == path);
    CHECK(l.find("param/fc.weight")->shape == std::vector<int64_t>{10, 300});
    CHECK(l.find("buffer/bn1.num_batches_tracked")->shape.empty());  // stored [1] + scalar = 1
    return std::string("dataset /param/fc.weight has shape [10, 300], model m needs [10, 301]");
  });
  CHECK(e == "checkpoint " + path + " is invalid: dataset /param/fc.weight has shape [10, 300], model m needs [10, 301]");
  CHECK(seen.size() == sample_data(12).tensors.size());
  REQUIRE_THROWS_AS(read_checkpoint_file(path, [](const CheckpointLayout&, const std::string&) -> std::string {
                      throw CheckpointRefusal("refused");
                    }),
                    CheckpointRefusal);
  // load_latest_checkpoint: a refusal stops the search; an invalid newest file falls back.
  auto run = dir / "run";
  write_checkpoint(run.string(), 1, sample_data(1));
  write_checkpoint(run.string(), 2, sample_data(2));
  std::vector<std::string> rejected;
  auto only_step_1 = [](const CheckpointLayout& l, const std::string&) {
    return l.ints.at("step") == 1 ? std::string() : "ints/step = " + std::to_string(l.ints.at("step")) + " refused";
  };
  auto l = load_latest_checkpoint(run.string(), false, nullptr, only_step_1, &rejected);
  REQUIRE(l);
  CHECK(l->data.get_int("step") == 1);
  REQUIRE(rejected.size() == 1);
  CHECK(rejected[0].find("ints/step = 2 refused") != std::string::npos);
  REQUIRE_THROWS_AS(load_latest_checkpoint(run.string(), true, nullptr,
                                           [](const CheckpointLayout&, const std::string&) -> std::string {
                                             throw CheckpointRefusal("model.name differs");
                                           }),
                    CheckpointRefusal);
  CHECK(list_checkpoints(run.string()).size() == 2);  // nothing quarantined
  CHECK(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL) == 0);
  fs::remove_all(dir);
}
