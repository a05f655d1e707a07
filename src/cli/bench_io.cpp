// hpctrain bench io [--data DIR] [--split train] [--batch B] [--epochs E] [--out FILE]
// Reader throughput on a prepared dataset, per world_size (run it under mpirun with 1, 2, ... ranks;
// each run replaces its own world_size entry in the JSON file). Every figure is aggregated over ranks:
// images / (slowest rank's seconds). Measured passes, all over this rank's share of one epoch:
//   raw_sequential   pread() of this rank's 1/W of the shard files' bytes in 1 MiB blocks (the
//                    ceiling: no HDF5, no decoding); warm page cache (a warm-up pass runs first)
//   read_sequential  Dataset::read of contiguous index ranges (eval order), batches of B/W
//   read_shuffled    Dataset::read of the train sampling rule's batches (random indices)
//   read_shuffled_hdf5  the same with HDF5 hyperslab reads (HT_DATASET_HDF5_READS) instead of pread
//   loader           DataLoader train mode: read + normalise to f32 NCHW, prefetch thread on
//   loader_augment   the same with crop padding 2 and flip
//   loader_resized_crop  (with --crop-size S) RandomResizedCrop to S x S, flip, normalise, on
//                    --loader-threads threads (data.loader_threads); MB/s counts the stored bytes read
// MB/s counts uint8 image bytes (H*W*C per image) for every pass.
#include <fcntl.h>
#include <sys/resource.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "io/dataset/dataset.hpp"
#include "mpi/dist.hpp"
#include "src/cli/cli_options.hpp"
#include "src/cli/commands.hpp"
#include "base/error.hpp"
#include "base/clock.hpp"
#include "base/log.hpp"

namespace fs = std::filesystem;

namespace ht {

namespace {

double cpu_s() {  // user + system time of the whole process (all threads)
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

struct Measure {
  double seconds = 0, images = 0, bytes = 0, cpu_seconds = 0;
};

// Runs f `reps` times on every rank between barriers and keeps the fastest repetition (the machine
// may be shared); aggregates images/bytes/CPU time (sum over ranks) and wall time (slowest rank).
template <class F> Measure timed(F&& f, int reps) {
  Measure best;
  for (int r = 0; r < reps; ++r) {
    dist_barrier("bench io: the ranks start a measurement together");
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = cpu_s();
    auto [img, bytes] = f();
    double dt = seconds_since(t0), dc = cpu_s() - c0;
    Measure m;
    m.seconds = static_cast<double>(dist_max(static_cast<long long>(dt * 1e6))) * 1e-6;
    m.images = dist_sum(img);
    m.bytes = dist_sum(bytes);
    m.cpu_seconds = dist_sum(dc);
    if (r == 0 || m.seconds < best.seconds) best = m;
  }
  return best;
}

nlohmann::json to_json(const Measure& m) {
  return {{"seconds", m.seconds},
          {"images", m.images},
          {"images_per_s", m.images / std::max(m.seconds, 1e-9)},
          {"MB_per_s", m.bytes / 1e6 / std::max(m.seconds, 1e-9)},
          {"cpu_seconds", m.cpu_seconds},
          {"images_per_cpu_s", m.images / std::max(m.cpu_seconds, 1e-9)}};
}

}  // namespace

int bench_io(const Args& args) {
  std::string dir = "data/fashion-mnist", split = "train", out = "results/cpu/bench_io.json";
  int64_t batch = 256;
  int epochs = 1, reps = 3, crop_size = 0, loader_threads = 1;
  CommandLine cl("hpctrain bench io",
                 "usage: [mpirun -np N] hpctrain bench io [--data DIR] [--split train|test] [--batch B] [--epochs E]\n"
                 "                                         [--reps R] [--crop-size S] [--loader-threads T] [--out FILE]");
  cl.option("data", &dir, "DIR", "prepared dataset (see scripts/quickstart.sh)")
      .option("split", &split, "S", "split to read: train or test")
      .option("batch", &batch, "B", "global batch")
      .option("epochs", &epochs, "E", "epochs per measurement")
      .option("reps", &reps, "R", "repetitions per measurement, the fastest is kept")
      .option("crop-size", &crop_size, "S", "also time the random resized crop to S x S (0: not)")
      .option("loader-threads", &loader_threads, "T", "threads of that loader pass (data.loader_threads)")
      .option("out", &out, "FILE", "JSON results, this world_size's entry replaced");
  if (!cl.parse(args)) return kExitOk;
  const int W = dist().world_size, R = dist().rank;
  if (batch < W || batch % W) cl.fail("--batch " + std::to_string(batch) + " must be a multiple of " + std::to_string(W));
  auto ds = open_sharded_dataset(dir, split);
  const DatasetInfo& info = ds->info();
  const int64_t N = info.num_samples;
  const double sample = static_cast<double>(info.height) * info.width * info.channels;
  const int64_t local = batch / W;

  // Raw: this rank's byte range of the concatenated shard files.
  std::vector<std::string> files;
  std::regex re(split + R"(-\d{5}-of-\d{5}\.h5)");
  for (auto& e : fs::directory_iterator(dir))
    if (std::regex_match(e.path().filename().string(), re)) files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  std::vector<int64_t> sizes;
  int64_t total = 0;
  for (auto& f : files) total += static_cast<int64_t>(sizes.emplace_back(static_cast<int64_t>(fs::file_size(f))));
  auto raw_pass = [&]() -> std::pair<double, double> {
    int64_t b = total * R / W, e = total * (R + 1) / W, pos = 0, got = 0;
    std::vector<char> buf(1 << 20);
    for (size_t k = 0; k < files.size(); ++k) {
      int64_t fb = std::max(b, pos), fe = std::min(e, pos + sizes[k]);
      if (fb < fe) {
        int fd = ::open(files[k].c_str(), O_RDONLY);
        if (fd < 0) throw RuntimeError(files[k] + ": cannot open");
        for (int64_t o = fb - pos; o < fe - pos;) {
          ssize_t r = ::pread(fd, buf.data(), static_cast<size_t>(std::min<int64_t>(buf.size(), fe - pos - o)), o);
          if (r <= 0) break;
          o += r;
          got += r;
        }
        ::close(fd);
      }
      pos += sizes[k];
    }
    return {static_cast<double>(got) / sample, static_cast<double>(got)};
  };
  raw_pass();  // warm the page cache
  Measure raw = timed([&] {
    std::pair<double, double> s{0, 0};
    for (int e = 0; e < epochs; ++e) {
      auto r = raw_pass();
      s.first += r.first;
      s.second += r.second;
    }
    return s;
  }, reps);

  std::vector<uint8_t> img(static_cast<size_t>(local * sample));
  std::vector<int32_t> lab(static_cast<size_t>(local));
  Measure seq = timed([&] {
    auto [b, e] = eval_range(N, R, W);
    double n = 0;
    std::vector<int64_t> idx;
    for (int ep = 0; ep < epochs; ++ep)
      for (int64_t s = b; s < e; s += local) {
        idx.clear();
        for (int64_t i = s; i < std::min(e, s + local); ++i) idx.push_back(i);
        ds->read(idx, std::span<uint8_t>(img.data(), idx.size() * static_cast<size_t>(sample)), std::span<int32_t>(lab.data(), idx.size()));
        n += static_cast<double>(idx.size());
      }
    return std::pair<double, double>{n, n * sample};
  }, reps);
  auto shuffled = [&](Dataset& d) {
    double n = 0;
    for (int ep = 0; ep < epochs; ++ep) {
      auto perm = epoch_permutation(N, 42, ep);
      for (int64_t s = 0; s < N / batch; ++s) {
        auto [b, e] = train_positions(s, batch, R, W);
        d.read(std::span<const int64_t>(perm.data() + b, static_cast<size_t>(e - b)), img, lab);
        n += static_cast<double>(e - b);
      }
    }
    return std::pair<double, double>{n, n * sample};
  };
  Measure shuf = timed([&] { return shuffled(*ds); }, reps);
  // The same through HDF5 hyperslab reads (the reader's fallback for compressed shards).
  bool forced = std::getenv("HT_DATASET_HDF5_READS") != nullptr;
  if (!forced) setenv("HT_DATASET_HDF5_READS", "1", 1);
  auto ds_h5 = open_sharded_dataset(dir, split);
  if (!forced) unsetenv("HT_DATASET_HDF5_READS");
  Measure shuf_h5 = timed([&] { return shuffled(*ds_h5); }, reps);
  auto loader_pass = [&](int pad, bool flip, int crop = 0, int threads = 1) {
    return timed([&] {
      DataLoader dl(ds, {.global_batch = batch, .rank = R, .world_size = W, .crop_padding = pad, .flip = flip,
                         .crop_size = crop, .resized_crop = crop > 0, .threads = threads});
      double n = 0;
      Batch bt;
      for (int ep = 0; ep < epochs; ++ep) {
        dl.start_epoch(ep);
        while (dl.next(bt)) n += static_cast<double>(bt.labels.numel());
      }
      return std::pair<double, double>{n, n * sample};
    }, reps);
  };
  Measure loader = loader_pass(0, false);
  Measure loader_aug = loader_pass(2, true);
  Measure loader_rrc;
  if (crop_size > 0) loader_rrc = loader_pass(0, true, crop_size, loader_threads);

  double load1 = 0;
  getloadavg(&load1, 1);
  if (R == 0) {
    unsigned maj = 0, min = 0, rel = 0;
    H5get_libversion(&maj, &min, &rel);
    nlohmann::json run = {
        {"world_size", W},
        {"hosts", dist().hosts},
        {"data", dir},
        {"split", split},
        {"source", info.source},
        {"num_samples", N},
        {"image_bytes", sample},
        {"global_batch", batch},
        {"epochs_per_measurement", epochs},
        {"hdf5", std::to_string(maj) + "." + std::to_string(min) + "." + std::to_string(rel)},
        {"cores", static_cast<int>(std::thread::hardware_concurrency())},
        {"page_cache", "warm"},
        {"repetitions", reps},
        {"load_average_1min", load1},
        {"reader", forced ? "hdf5 hyperslab reads" : "pread through the chunk map"},
        {"raw_sequential", to_json(raw)},
        {"read_sequential", to_json(seq)},
        {"read_shuffled", to_json(shuf)},
        {"read_shuffled_hdf5", to_json(shuf_h5)},
        {"loader", to_json(loader)},
        {"loader_augment", to_json(loader_aug)},
    };
    if (crop_size > 0) {
      run["loader_resized_crop"] = to_json(loader_rrc);
      run["loader_resized_crop"]["crop_size"] = crop_size;
      run["loader_resized_crop"]["loader_threads"] = loader_threads;
    }
    nlohmann::json doc = {{"benchmark", "io"}, {"runs", nlohmann::json::array()}};
    if (fs::exists(out)) {
      try {
        std::ifstream in(out);
        doc = nlohmann::json::parse(in);
      } catch (...) {
      }
    }
    auto& runs = doc["runs"];
    nlohmann::json kept = nlohmann::json::array();
    for (auto& r : runs)
      if (!(r.value("world_size", -1) == W && r.value("global_batch", -1) == batch && r.value("data", "") == dir)) kept.push_back(r);
    kept.push_back(run);
    std::sort(kept.begin(), kept.end(), [](const auto& a, const auto& b) { return a.value("world_size", 0) < b.value("world_size", 0); });
    doc["runs"] = kept;
    doc["notes"] =
        "images_per_s and MB_per_s: wall clock, images summed over ranks / slowest rank's seconds, fastest of "
        "'repetitions' runs, warm page cache. images_per_cpu_s: the same images over process CPU time summed over "
        "ranks (includes the prefetch thread), the per-core cost, which is stable on a shared machine where wall "
        "figures follow the load average. MB counts uint8 image bytes (10^6).";
    doc["command"] = "mpirun -np N hpctrain bench io --data " + dir + " --batch " + std::to_string(batch);
    if (fs::path(out).has_parent_path()) fs::create_directories(fs::path(out).parent_path());
    std::ofstream(out) << doc.dump(2) << "\n";
    log_raw_out(strf("bench io: %s, %lld samples of %.0f bytes, world_size %d, global batch %lld", dir.c_str(),
                     static_cast<long long>(N), sample, W, static_cast<long long>(batch)));
    log_raw_out(strf("  %-16s %12s %10s %14s   (load average %.1f on %u cores)", "pass", "images/s", "MB/s", "images/cpu-s",
                     load1, std::thread::hardware_concurrency()));
    for (auto [name, m] : {std::pair{"raw_sequential", raw}, {"read_sequential", seq}, {"read_shuffled", shuf},
                           {"read_shuffled_hdf5", shuf_h5},
                           {"loader", loader}, {"loader_augment", loader_aug}})
      log_raw_out(strf("  %-16s %12.0f %10.1f %14.0f", name, m.images / m.seconds, m.bytes / 1e6 / m.seconds,
                       m.images / m.cpu_seconds));
    log_raw_out(strf("  written to %s", out.c_str()));
  }
  return kExitOk;
}

}  // namespace ht
