// Checkpoint files: round trip, checksums and structure, atomic write + LATEST + pruning, fallback to
// the previous checkpoint on corruption, temporary-file cleanup, disk-full handling, the async
// writer and the Young/Daly interval (the stop signals: test_signals.cpp).
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

#include "tests/unit/temp_dir_util.hpp"

namespace fs = std::filesystem;
using namespace ht;

namespace {

fs::path fresh_dir(const std::string& name) { return test::fresh_temp_dir("ht_ckpt", name); }

Tensor filled(std::vector<int64_t> shape, float base) {
  Tensor t = Tensor::empty(shape);
  auto s = t.span<float>();
  for (size_t i = 0; i < s.size(); ++i) s[i] = base + 0.001f * static_cast<float>(i) - 1e-7f * static_cast<float>(i * i);
  return t;
}

CheckpointData sample_data(int64_t step, int64_t big = 300) {
  CheckpointData d;
  d.tensors.emplace_back("param/conv1.weight", filled({8, 3, 3, 3}, 0.5f));
  d.tensors.emplace_back("param/fc.weight", filled({10, big}, -1.25f));
  d.tensors.emplace_back("param/fc.bias", filled({10}, 3.f));
  d.tensors.emplace_back("buffer/bn1.running_mean", filled({8}, 0.1f));
  d.tensors.emplace_back("buffer/bn1.num_batches_tracked", filled({}, 7.f));
  d.tensors.emplace_back("param/empty", Tensor::empty({0}));
  d.tensors.emplace_back("momentum/conv1.weight", filled({8, 3, 3, 3}, 2e-3f));
  d.tensors.emplace_back("momentum/fc.weight", filled({10, big}, 1e-3f));
  d.tensors.emplace_back("momentum/fc.bias", filled({10}, 4e-3f));
  d.tensors.emplace_back("momentum/empty", Tensor::empty({0}));
  // Consistent progress: 2 epochs of 100 steps and 17 of the third, plus the offset that makes
  // steps done = epoch x steps_per_epoch + step_in_epoch + epoch_offset hold for any `step`.
  d.ints = {{"step", step}, {"epoch", 2}, {"step_in_epoch", 17}, {"world_size", 2}, {"seed", -5},
            {"global_batch", 64}, {"big", int64_t(1) << 50}, {"steps_per_epoch", 100},
            {"total_steps", 1000}, {"nonfinite_in_row", 0}, {"nonfinite_total", 0},
            {"epoch_offset", step - 217}};
  d.floats = {{"lr", 0.0123456789012345}, {"loss_scale", 65536.0}};
  d.strings = {{"model", "fmnist_cnn"}, {"config", "[run]\nseed = 1\n"}, {"empty", ""}};
  return d;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

void require_equal(const CheckpointData& a, const CheckpointData& b) {
  REQUIRE(a.tensors.size() == b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    INFO(a.tensors[i].first);
    REQUIRE(a.tensors[i].first == b.tensors[i].first);
    REQUIRE(bitwise_equal(a.tensors[i].second, b.tensors[i].second));
  }
  REQUIRE(a.ints == b.ints);
  REQUIRE(a.floats == b.floats);
  REQUIRE(a.strings == b.strings);
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}
void spit(const fs::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << s;
}

// Offset of the raw float bytes of `t` inside the file (data are stored uncompressed).
size_t find_tensor_bytes(const std::string& file, const Tensor& t) {
  std::string needle(static_cast<const char*>(t.raw()), std::min<size_t>(t.nbytes(), 64));
  auto pos = file.find(needle);
  REQUIRE(pos != std::string::npos);
  return pos;
}

}  // namespace

TEST_CASE("checkpoint file round trip is bitwise", "[checkpoint]") {
  auto dir = fresh_dir("roundtrip");
  auto path = (dir / "a.h5").string();
  auto d = sample_data(12);
  write_checkpoint_file(path, d);
  REQUIRE(is_checkpoint_file(path));
  auto r = read_checkpoint_file(path);
  require_equal(d, r);
  REQUIRE(r.find("buffer/bn1.num_batches_tracked")->ndim() == 0);
  REQUIRE(r.find("momentum/empty")->numel() == 0);
  REQUIRE(r.get_int("step") == 12);
  REQUIRE_THROWS_AS(r.get_int("nope"), UsageError);
  // A tiny ~12 KB payload: the expected size bounds the real file from above.
  REQUIRE(fs::file_size(path) <= checkpoint_expected_bytes(d));
  REQUIRE(inspect_checkpoint(path) == 0);
  REQUIRE_FALSE(is_checkpoint_file((dir / "missing.h5").string()));
  fs::remove_all(dir);
}

TEST_CASE("checkpoint rejects reserved or malformed names", "[checkpoint]") {
  auto dir = fresh_dir("names");
  CheckpointData d;
  d.ints["step"] = 1;
  d.tensors.emplace_back("ints/x", filled({2}, 1.f));
  REQUIRE_THROWS_AS(write_checkpoint_file((dir / "x.h5").string(), d), RuntimeError);
  d.tensors.clear();
  d.ints["a/b"] = 1;
  REQUIRE_THROWS_AS(write_checkpoint_file((dir / "y.h5").string(), d), RuntimeError);
  fs::remove_all(dir);
}

TEST_CASE("per-rank buffers: version 2 by content, and the reader checks the group completely", "[checkpoint]") {
  auto dir = fresh_dir("rank_buffer");
  auto path = (dir / "a.h5").string();
  auto base = sample_data(12);  // world_size 2, buffers bn1.running_mean [8] and bn1.num_batches_tracked []
  CHECK(checkpoint_version_for(base) == 1);
  write_checkpoint_file(path, base);
  CHECK(read_checkpoint_file(path).version == 1);
  auto with_ranks = [&](int ranks) {
    CheckpointData d = sample_data(12);
    for (int r = 0; r < ranks; ++r) {
      d.tensors.emplace_back(rank_buffer_name(r, "bn1.running_mean"), filled({8}, 0.1f + static_cast<float>(r)));
      d.tensors.emplace_back(rank_buffer_name(r, "bn1.num_batches_tracked"), filled({}, 7.f));
    }
    return d;
  };
  CheckpointData good = with_ranks(2);
  CHECK(checkpoint_version_for(good) == 2);
  CHECK(rank_buffer_problem(good, 2).empty());
  write_checkpoint_file(path, good);
  CheckpointData back = read_checkpoint_file(path);
  CHECK(back.version == 2);
  require_equal(good, back);
  REQUIRE(inspect_checkpoint(path) == 0);

  // Each malformed group is named; the reader (training and inspect alike) refuses the file.
  auto problem = [&](CheckpointData d) {
    std::string p = rank_buffer_problem(d, checkpoint_version_for(d));
    write_checkpoint_file(path, d);
    try {
      read_checkpoint_file(path);
      FAIL("read accepted: " + p);
    } catch (const UsageError& e) {
      CHECK(std::string(e.what()).find(p) != std::string::npos);
    }
    CHECK(inspect_checkpoint(path) == kExitUsage);
    return p;
  };
  CHECK(problem(with_ranks(1)) == "group /rank_buffer/1 is missing (world_size 2 needs ranks 0 to 1)");
  CHECK(problem(with_ranks(3)) == "dataset /rank_buffer/2/bn1.num_batches_tracked: rank 2 is outside world_size 2");
  CheckpointData d = with_ranks(2);
  d.tensors.pop_back();
  CHECK(problem(d) == "dataset /rank_buffer/1/bn1.num_batches_tracked is missing");
  d = with_ranks(2);
  d.tensors.back().second = filled({2}, 1.f);
  CHECK(problem(d) == "dataset /rank_buffer/1/bn1.num_batches_tracked has shape [2], /buffer/bn1.num_batches_tracked has []");
  d = with_ranks(2);
  d.tensors.emplace_back("rank_buffer/0/bn9.running_var", filled({8}, 1.f));
  CHECK(problem(d) == "dataset /rank_buffer/0/bn9.running_var has no /buffer/bn9.running_var");
  d = with_ranks(2);
  d.tensors.emplace_back("rank_buffer/01/bn1.running_mean", filled({8}, 1.f));
  CHECK(problem(d) == "dataset /rank_buffer/01/bn1.running_mean is not named rank_buffer/<rank>/<buffer name>");
  d = with_ranks(2);
  d.ints["world_size"] = 1;
  CHECK(problem(d) == "ints/world_size = 1 with per-rank buffers");
  d = with_ranks(2);
  d.ints.erase("world_size");
  CHECK(problem(d) == "dataset /ints/world_size is missing (a version 2 file needs it)");
  // A version-1 file has no per-rank buffers; a version-2 file has them.
  CHECK(rank_buffer_problem(good, 1) == "dataset /rank_buffer/0/bn1.running_mean in a version 1 file (per-rank buffers are version 2)");
  CHECK(rank_buffer_problem(base, 2) == "version 2 file without per-rank buffers (/rank_buffer/<rank>/...)");
  fs::remove_all(dir);
}

TEST_CASE("checkpoint names parse", "[checkpoint]") {
  REQUIRE(checkpoint_step_from_name("step-00001200.h5") == 1200);
  REQUIRE(checkpoint_step_from_name("step-00000000.h5") == 0);
  REQUIRE(checkpoint_step_from_name("step-00001200.h5.tmp.123") == -1);
  REQUIRE(checkpoint_step_from_name("step-00001200.h5.bad") == -1);
  REQUIRE(checkpoint_step_from_name("step-.h5") == -1);
  REQUIRE(checkpoint_step_from_name("LATEST") == -1);
  REQUIRE(checkpoint_path("/r", 1200) == "/r/checkpoints/step-00001200.h5");
}

TEST_CASE("a flipped data byte fails the fletcher32 checksum; truncation fails too", "[checkpoint]") {
  auto dir = fresh_dir("flip");
  auto path = dir / "c.h5";
  auto d = sample_data(3);
  write_checkpoint_file(path.string(), d);
  std::string bytes = slurp(path);
  size_t off = find_tensor_bytes(bytes, *d.find("param/fc.weight")) + 40;
  std::string bad = bytes;
  bad[off] = static_cast<char>(bad[off] ^ 0x10);
  spit(path, bad);
  try {
    read_checkpoint_file(path.string());
    FAIL("corrupted checkpoint read without error");
  } catch (const UsageError& e) {
    std::string msg = e.what();
    INFO(msg);
    REQUIRE(msg.find(path.string()) != std::string::npos);
    REQUIRE(msg.find("param/fc.weight") != std::string::npos);
  }
  REQUIRE(inspect_checkpoint(path.string()) == 2);
  spit(path, bytes.substr(0, bytes.size() * 2 / 3));
  REQUIRE_THROWS_AS(read_checkpoint_file(path.string()), UsageError);
  spit(path, "");
  REQUIRE_THROWS_AS(read_checkpoint_file(path.string()), UsageError);
  fs::remove_all(dir);
}

TEST_CASE("a byte flipped anywhere is detected or harmless, never silently wrong", "[checkpoint]") {
  auto dir = fresh_dir("fuzz");
  auto path = dir / "c.h5";
  auto d = sample_data(3, 40);
  write_checkpoint_file(path.string(), d);
  const std::string bytes = slurp(path);
  std::mt19937 rng(1234);
  int detected = 0, harmless = 0;
  for (int i = 0; i < 300; ++i) {
    std::string bad = bytes;
    size_t off = std::uniform_int_distribution<size_t>(0, bad.size() - 1)(rng);
    bad[off] = static_cast<char>(bad[off] ^ (1 << (i % 8)));
    spit(path, bad);
    try {
      auto r = read_checkpoint_file(path.string());
      INFO("offset " << off);
      require_equal(d, r);  // a flip in unused space or padding must not change anything
      ++harmless;
    } catch (const UsageError&) {
      ++detected;
    }
  }
  INFO("detected " << detected << ", harmless " << harmless);
  REQUIRE(detected > 150);
  CHECK(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL) == 0);  // no identifier left open by a failed read
  fs::remove_all(dir);
}

TEST_CASE("write_checkpoint: atomic files, LATEST, keep_last and keep_every", "[checkpoint]") {
  auto run = fresh_dir("prune");
  CheckpointWriteOptions opt;
  opt.keep_last = 2;
  opt.keep_every = 4;
  for (int64_t s = 1; s <= 10; ++s) {
    auto r = write_checkpoint(run.string(), s, sample_data(s, 20), opt);
    REQUIRE(r.path == checkpoint_path(run.string(), s));
    REQUIRE(r.bytes == fs::file_size(r.path));
    REQUIRE(r.write_ms > 0);
    REQUIRE(slurp(run / "LATEST") == "checkpoints/step-" + std::string(s < 10 ? "0000000" : "000000") +
                                          std::to_string(s) + ".h5\n");
  }
  std::vector<int64_t> steps;
  for (auto& [s, p] : list_checkpoints(run.string())) steps.push_back(s);
  REQUIRE(steps == std::vector<int64_t>{4, 8, 9, 10});
  for (auto& e : fs::directory_iterator(run / "checkpoints"))
    REQUIRE(e.path().filename().string().find(".tmp.") == std::string::npos);
  auto l = load_latest_checkpoint(run.string(), false, nullptr);
  REQUIRE(l);
  REQUIRE(l->data.get_int("step") == 10);
  REQUIRE(l->rejected.empty());
  fs::remove_all(run);
}

TEST_CASE("resume falls back past corrupt or truncated checkpoints and ignores temporary files", "[checkpoint]") {
  auto run = fresh_dir("fallback");
  CheckpointWriteOptions opt;
  opt.keep_last = 5;
  for (int64_t s : {5, 10, 15}) write_checkpoint(run.string(), s, sample_data(s), opt);
  // A writer killed mid-write leaves a temporary file: newer step, garbage content.
  auto tmp = run / "checkpoints" / "step-00000020.h5.tmp.4242";
  spit(tmp, "partial");
  spit(run / "LATEST.tmp.4242", "checkpoints/step-00000020.h5\n");
  // Corrupt 15 (flip a data byte) and truncate 10.
  auto p15 = checkpoint_path(run.string(), 15), p10 = checkpoint_path(run.string(), 10);
  std::string b15 = slurp(p15);
  size_t off = find_tensor_bytes(b15, *sample_data(15).find("param/fc.weight")) + 100;
  b15[off] = static_cast<char>(b15[off] ^ 0xff);
  spit(p15, b15);
  std::string b10 = slurp(p10);
  spit(p10, b10.substr(0, b10.size() / 2));

  std::vector<std::string> warnings;
  auto l = load_latest_checkpoint(run.string(), true, [&](const std::string& w) { warnings.push_back(w); });
  REQUIRE(l);
  REQUIRE(l->path == checkpoint_path(run.string(), 5));
  REQUIRE(l->data.get_int("step") == 5);
  require_equal(sample_data(5), l->data);
  REQUIRE(l->rejected.size() == 2);
  REQUIRE(l->rejected[0].find(p15) != std::string::npos);
  REQUIRE(l->rejected[1].find(p10) != std::string::npos);
  REQUIRE(!warnings.empty());
  REQUIRE(warnings[0].find(p15) != std::string::npos);
  // Quarantined: not listed any more, kept as .bad for inspection.
  REQUIRE(fs::exists(p15 + ".bad"));
  REQUIRE(list_checkpoints(run.string()).size() == 1);

  auto removed = clean_temporary_files(run.string());
  REQUIRE(removed.size() == 2);
  REQUIRE_FALSE(fs::exists(tmp));
  REQUIRE_FALSE(fs::exists(run / "LATEST.tmp.4242"));
  REQUIRE(fs::exists(run / "LATEST"));

  // Nothing valid at all: nullopt, every file named.
  auto p5 = checkpoint_path(run.string(), 5);
  spit(p5, "not hdf5");
  auto none = load_latest_checkpoint(run.string(), false, nullptr);
  REQUIRE_FALSE(none);
  fs::remove_all(run);
}

TEST_CASE("disk full (file-size limit): error names path and size, previous checkpoint and LATEST kept",
          "[checkpoint]") {
  auto run = fresh_dir("full");
  CheckpointWriteOptions opt;
  opt.check_space = false;  // reach the real write failure (the statvfs check is tested below)
  write_checkpoint(run.string(), 1, sample_data(1, 20), opt);
  std::string latest = slurp(run / "LATEST");
  auto big = sample_data(2, 200000);  // ~16 MB
  struct sigaction ign {}, old {};
  ign.sa_handler = SIG_IGN;
  sigaction(SIGXFSZ, &ign, &old);
  struct rlimit saved {};
  getrlimit(RLIMIT_FSIZE, &saved);
  struct rlimit lim = saved;
  lim.rlim_cur = 1 << 20;
  REQUIRE(setrlimit(RLIMIT_FSIZE, &lim) == 0);
  std::string msg;
  try {
    write_checkpoint(run.string(), 2, big, opt);
  } catch (const RuntimeError& e) {
    msg = e.what();
  }
  setrlimit(RLIMIT_FSIZE, &saved);
  sigaction(SIGXFSZ, &old, nullptr);
  INFO(msg);
  REQUIRE(!msg.empty());
  REQUIRE(msg.find(checkpoint_path(run.string(), 2)) != std::string::npos);
  REQUIRE(msg.find(" bytes (") != std::string::npos);  // "N bytes (X MiB) needed"
  REQUIRE(msg.find("needed") != std::string::npos);
  REQUIRE(msg.find("File too large") != std::string::npos);
  REQUIRE(slurp(run / "LATEST") == latest);
  REQUIRE(list_checkpoints(run.string()).size() == 1);
  for (auto& e : fs::directory_iterator(run / "checkpoints"))
    REQUIRE(e.path().filename().string().find(".tmp.") == std::string::npos);
  REQUIRE(load_latest_checkpoint(run.string(), false, nullptr)->data.get_int("step") == 1);

  // The statvfs pre-check names the directory, the bytes needed and the bytes available.
  try {
    check_free_space(run.string(), size_t(1) << 62);
    FAIL("no error");
  } catch (const RuntimeError& e) {
    std::string m = e.what();
    REQUIRE(m.find(run.string()) != std::string::npos);
    REQUIRE(m.find(std::to_string(size_t(1) << 62) + " bytes") != std::string::npos);
  }
  // An unusable directory (a path below a regular file).
  spit(run / "plainfile", "x");
  REQUIRE_THROWS_AS(write_checkpoint((run / "plainfile" / "run").string(), 1, sample_data(1, 20)), RuntimeError);
  fs::remove_all(run);
}

// Runs this test binary again on test case `name` with HT_TEST_FAULTS=`faults` in its environment
// (TestFaults reads the variable once per process) and returns the child's exit status.
int rerun_with_faults(const std::string& name, const std::string& faults) {
  std::vector<std::string> env_text{"HT_TEST_FAULTS=" + faults};
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "HT_TEST_FAULTS=", 15) != 0) env_text.emplace_back(*e);
  std::vector<char*> envp;
  for (auto& e : env_text) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string exe = fs::read_symlink("/proc/self/exe").string();
  std::vector<char*> argv{exe.data(), const_cast<char*>(name.c_str()), nullptr};
  pid_t pid = 0;
  if (posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), envp.data()) != 0) return -1;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

TEST_CASE("async writer: second save waits for the first; errors surface", "[checkpoint]") {
  // Slow writes come from the test-only fault HT_TEST_FAULTS ckpt_write_delay_ms (300 ms half-way
  // through each write); without it in this process, the test reruns itself in a child that has it.
  if (TestFaults::get().number("ckpt_write_delay_ms", 0) != 300) {
    REQUIRE(rerun_with_faults(Catch::getResultCapture().getCurrentTestName(), "ckpt_write_delay_ms=300") == 0);
    return;
  }
  auto run = fresh_dir("async");
  CheckpointWriteOptions opt;
  {
    CheckpointWriter w(run.string(), opt, true);
    auto s1 = w.save(1, sample_data(1, 20));
    REQUIRE(s1.stall_ms < 100);
    REQUIRE(w.busy());
    auto s2 = w.save(2, sample_data(2, 20));
    REQUIRE(s2.stall_ms > 150);  // waited for write 1
    w.wait();
    REQUIRE_FALSE(w.busy());
    auto done = w.take_completed();
    REQUIRE(done.size() == 2);
    REQUIRE(done[0].path == checkpoint_path(run.string(), 1));
    REQUIRE(done[1].write_ms >= 300);
    REQUIRE(w.take_completed().empty());
    REQUIRE(w.error().empty());
  }
  {
    spit(run / "plainfile", "x");
    CheckpointWriter w((run / "plainfile" / "run").string(), {}, true);
    w.save(1, sample_data(1, 20));
    REQUIRE_THROWS_AS(w.wait(), RuntimeError);
    REQUIRE(!w.error().empty());
    REQUIRE_THROWS_AS(w.save(2, sample_data(2, 20)), RuntimeError);
  }
  {
    CheckpointWriter w(run.string(), {}, false);
    auto s = w.save(3, sample_data(3, 20));
    REQUIRE_FALSE(w.busy());
    REQUIRE(w.take_completed().size() == 1);
    REQUIRE(s.stall_ms > 0);
  }
  fs::remove_all(run);
}

TEST_CASE("fast fletcher32 equals HDF5's loop", "[checkpoint]") {
  std::mt19937 rng(7);
  for (size_t n : {0, 1, 2, 3, 719, 720, 721, 4096, 131071, 131072, 131073, 1 << 20}) {
    for (int fill = 0; fill < 4; ++fill) {
      std::vector<unsigned char> a(n), b(n, 0xAA);
      for (size_t i = 0; i < n; ++i)
        a[i] = fill == 0 ? 0 : fill == 1 ? 0xff : fill == 2 ? static_cast<unsigned char>(rng()) : (i + 1 == n ? 1 : 0);
      INFO("n " << n << " fill " << fill);
      REQUIRE(fletcher32_copy(b.data(), a.data(), n) == fletcher32_reference(a.data(), n));
      REQUIRE(a == b);
      REQUIRE(fletcher32_copy(nullptr, a.data(), n) == fletcher32_reference(a.data(), n));
    }
  }
}

TEST_CASE("expected size bounds the file; edge-chunk padding stays small", "[checkpoint]") {
  auto dir = fresh_dir("size");
  CheckpointData d;
  d.ints["step"] = 1;
  d.tensors.emplace_back("param/a", filled({512, 512, 3, 1}, 1.f));  // 3 MiB: 4 even chunks
  d.tensors.emplace_back("param/b", filled({513, 700}, 2.f));        // 1.4 MiB, 513 rows
  d.tensors.emplace_back("param/c", filled({7}, 3.f));
  auto path = (dir / "s.h5").string();
  write_checkpoint_file(path, d);
  size_t file = fs::file_size(path);
  INFO("payload " << d.payload_bytes() << " file " << file << " expected " << checkpoint_expected_bytes(d));
  REQUIRE(file <= checkpoint_expected_bytes(d));
  REQUIRE(file < d.payload_bytes() * 101 / 100 + 16384);
  require_equal(d, read_checkpoint_file(path));
  fs::remove_all(dir);
}

// ---- untrusted checkpoints: counters, declared sizes, the model (issue 12, section 2) ----

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
    d.tensors.emplace_back("buffer/bn1.running_var", filled({8}, -0.5f));
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
