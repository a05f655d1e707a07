// Checkpoint files: round trip, checksums and structure, atomic write + LATEST + pruning, fallback to
// the previous checkpoint on corruption, temporary-file cleanup, disk-full handling, the async
// writer (validation before use: test_checkpoint_validate.cpp; the stop signals: test_signals.cpp).
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
using test::filled;
using test::sample_data;

namespace {

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
  std::string bytes = test::file_bytes(path);
  size_t off = find_tensor_bytes(bytes, *d.find("param/fc.weight")) + 40;
  std::string bad = bytes;
  bad[off] = static_cast<char>(bad[off] ^ 0x10);
  test::write_file_bytes(path, bad);
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
  test::write_file_bytes(path, bytes.substr(0, bytes.size() * 2 / 3));
  REQUIRE_THROWS_AS(read_checkpoint_file(path.string()), UsageError);
  test::write_file_bytes(path, "");
  REQUIRE_THROWS_AS(read_checkpoint_file(path.string()), UsageError);
  fs::remove_all(dir);
}

TEST_CASE("a byte flipped anywhere is detected or harmless, never silently wrong", "[checkpoint]") {
  auto dir = fresh_dir("fuzz");
  auto path = dir / "c.h5";
  auto d = sample_data(3, 40);
  write_checkpoint_file(path.string(), d);
  const std::string bytes = test::file_bytes(path);
  std::mt19937 rng(1234);
  int detected = 0, harmless = 0;
  for (int i = 0; i < 300; ++i) {
    std::string bad = bytes;
    size_t off = std::uniform_int_distribution<size_t>(0, bad.size() - 1)(rng);
    bad[off] = static_cast<char>(bad[off] ^ (1 << (i % 8)));
    test::write_file_bytes(path, bad);
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
  const CheckpointWriteOptions opt{.keep_last = 2, .keep_every = 4};
  for (int64_t s = 1; s <= 10; ++s) {
    auto r = write_checkpoint(run.string(), s, sample_data(s, 20), opt);
    REQUIRE(r.path == checkpoint_path(run.string(), s));
    REQUIRE(r.bytes == fs::file_size(r.path));
    REQUIRE(r.write_ms > 0);
    REQUIRE(test::file_bytes(run / "LATEST") == "checkpoints/step-" + std::string(s < 10 ? "0000000" : "000000") +
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
  const CheckpointWriteOptions opt{.keep_last = 5};
  for (int64_t s : {5, 10, 15}) write_checkpoint(run.string(), s, sample_data(s), opt);
  // A writer killed mid-write leaves a temporary file: newer step, garbage content.
  auto tmp = run / "checkpoints" / "step-00000020.h5.tmp.4242";
  test::write_file_bytes(tmp, "partial");
  test::write_file_bytes(run / "LATEST.tmp.4242", "checkpoints/step-00000020.h5\n");
  // Corrupt 15 (flip a data byte) and truncate 10.
  auto p15 = checkpoint_path(run.string(), 15), p10 = checkpoint_path(run.string(), 10);
  std::string b15 = test::file_bytes(p15);
  size_t off = find_tensor_bytes(b15, *sample_data(15).find("param/fc.weight")) + 100;
  b15[off] = static_cast<char>(b15[off] ^ 0xff);
  test::write_file_bytes(p15, b15);
  std::string b10 = test::file_bytes(p10);
  test::write_file_bytes(p10, b10.substr(0, b10.size() / 2));

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
  test::write_file_bytes(p5, "not hdf5");
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
  std::string latest = test::file_bytes(run / "LATEST");
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
  REQUIRE(test::file_bytes(run / "LATEST") == latest);
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
  test::write_file_bytes(run / "plainfile", "x");
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
    test::write_file_bytes(run / "plainfile", "x");
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
