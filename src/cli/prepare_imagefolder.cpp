// `hpctrain prepare --format imagefolder` across ranks. Rank 0 finds the files and shares the plan;
// the shards are dealt round-robin (shard j of the job list to rank j % world_size), one round at a
// time with an agreement after each, so a --strict failure or a bad option stops every rank
// together. Each converted shard is staged in OUT/.prepare/ with a sidecar (its samples, its skipped
// files, its pixel sums) that marks it done; when all are, the train split's mean/std are computed
// from the sidecars, written into every staged shard, and the shards renamed into place. A rerun
// with the same plan (input files and options, hashed) resumes from the sidecars.
#include "src/cli/prepare_imagefolder.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "base/clock.hpp"
#include "base/error.hpp"
#include "base/hash.hpp"
#include "base/log.hpp"
#include "io/dataset/dataset_h5.hpp"
#include "io/dataset/imagefolder.hpp"
#include "mpi/dist.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace ht {
namespace {

// Strings as "length:bytes", so any file name (a tab, a newline) survives the broadcast.
void put(std::string& out, const std::string& s) { out += std::to_string(s.size()) + ":" + s; }
std::string take(const std::string& in, size_t& pos) {
  size_t colon = in.find(':', pos);
  size_t len = std::stoull(in.substr(pos, colon - pos));
  std::string s = in.substr(colon + 1, len);
  pos = colon + 1 + len;
  return s;
}

std::string encode_plan(const ImageFolderPlan& p) {
  std::string out;
  put(out, p.layout);
  put(out, std::to_string(p.classes.size()));
  for (auto& c : p.classes) put(out, c);
  for (const auto* split : {&p.train, &p.test}) {
    put(out, std::to_string(split->size()));
    for (auto& f : *split) {
      put(out, f.path);
      put(out, f.rel);
      put(out, std::to_string(f.label));
    }
  }
  return out;
}

ImageFolderPlan decode_plan(const std::string& in) {
  ImageFolderPlan p;
  size_t pos = 0;
  p.layout = take(in, pos);
  p.classes.resize(std::stoull(take(in, pos)));
  for (auto& c : p.classes) c = take(in, pos);
  for (auto* split : {&p.train, &p.test}) {
    split->resize(std::stoull(take(in, pos)));
    for (auto& f : *split) {
      f.path = take(in, pos);
      f.rel = take(in, pos);
      f.label = std::stoi(take(in, pos));
    }
  }
  return p;
}

// Text written under a temporary name and renamed: a reader sees the whole file or none.
void write_text_atomic(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) throw RuntimeError(tmp.string() + ": cannot write: " + std::strerror(errno));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw RuntimeError("cannot rename " + tmp.string() + " to " + path.string() + ": " + ec.message());
}

json read_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return json();
  try {
    return json::parse(in);
  } catch (const json::exception&) {
    return json();  // a torn or foreign file: the shard is converted again
  }
}

struct ShardJob {
  std::string split;  // "train" or "test"
  int index = 0, count = 0;
  size_t begin = 0, end = 0;  // files [begin, end) of the split
  std::string name() const { return shard_file_name(split, index, count); }
};

// One line of a TSV file: a tab or newline inside a file name would break the columns.
std::string tsv_field(std::string s) {
  for (char& c : s)
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  return s;
}

int default_shards(size_t files) {
  return static_cast<int>(std::max<int64_t>(1, (static_cast<int64_t>(files) + kImagesPerShard - 1) / kImagesPerShard));
}

void check_options(const ImageFolderPrepareOptions& o) {
  if (o.size < 8 || o.size > 4096) throw UsageError("--size " + std::to_string(o.size) + ": must be in [8, 4096]");
  if (o.channels != 1 && o.channels != 3) throw UsageError("--channels " + std::to_string(o.channels) + ": must be 1 or 3");
  if (o.shards < 0 || o.test_shards < 0) throw UsageError("--shards/--test-shards: must be >= 1");
  if (o.threads < 0) throw UsageError("--threads " + std::to_string(o.threads) + ": must be >= 0 (0: automatic)");
  if (o.gzip < 0 || o.gzip > 9) throw UsageError("--gzip " + std::to_string(o.gzip) + ": must be in [0, 9]");
  if (o.max_pixels < 1) throw UsageError("--max-pixels " + std::to_string(o.max_pixels) + ": must be >= 1");
  if (o.storage != "raw" && o.storage != "encoded") throw UsageError("--storage '" + o.storage + "': expected raw or encoded");
  if (o.max_side < 0 || (o.max_side > 0 && o.storage != "encoded"))
    throw UsageError("--max-side " + std::to_string(o.max_side) + ": applies to --storage encoded only, and must be >= 0");
  if (o.max_side > 0 && o.max_side < o.size)
    throw UsageError("--max-side " + std::to_string(o.max_side) + ": below --size " + std::to_string(o.size) +
                     " (the loader would upscale every large image)");
  if (o.output.empty() || o.input.empty()) throw UsageError("--input and --output are required");
}

}  // namespace

void prepare_image_folder(const ImageFolderPrepareOptions& o) {
  const DistContext& d = dist();
  const auto t0 = SteadyClock::now();
  const fs::path out = o.output, work = fs::path(o.output) / ".prepare";

  // 1. The plan: found by rank 0 (one listing of the file system, not one per rank), shared.
  std::string plan_text;
  ImageFolderPlan plan;
  collective_usage_check([&] {
    check_options(o);
    if (d.rank != 0) return;
    plan = plan_image_folder(o.input, o.val_fraction, static_cast<uint64_t>(o.seed));
    for (auto [n, s, what] : {std::tuple{plan.train.size(), o.shards, "--shards"}, {plan.test.size(), o.test_shards, "--test-shards"}})
      if (s > 0 && static_cast<size_t>(s) > n)
        throw UsageError(std::string(what) + " " + std::to_string(s) + ": more shards than the " + std::to_string(n) + " files of the split");
    plan_text = encode_plan(plan);
  });
  std::vector<char> bytes(static_cast<size_t>(dist_max(static_cast<long long>(plan_text.size()))));
  if (d.rank == 0) std::copy(plan_text.begin(), plan_text.end(), bytes.begin());
  dist_broadcast(bytes, "prepare: the file list from rank 0");
  if (d.rank != 0) plan = decode_plan(std::string(bytes.begin(), bytes.end()));

  std::vector<ShardJob> jobs;
  for (auto [split, files, given] : {std::tuple{"train", &plan.train, o.shards}, {"test", &plan.test, o.test_shards}}) {
    const int count = given > 0 ? given : default_shards(files->size());
    for (int k = 0; k < count; ++k)
      jobs.push_back({split, k, count, files->size() * k / count, files->size() * (k + 1) / count});
  }
  // The plan's identity: the files, their labels and everything that changes a shard's bytes.
  const std::string plan_id = hex64(fnv1a(std::string(bytes.begin(), bytes.end()) +
                                          strf("|size %d|channels %d|gzip %d|max_pixels %lld|shards %d/%d|storage %s|max_side %d",
                                               o.size, o.channels, o.gzip, static_cast<long long>(o.max_pixels),
                                               jobs.front().count, jobs.back().count, o.storage.c_str(), o.max_side)));
  const size_t total_files = plan.train.size() + plan.test.size();

  // 2. Done already? Otherwise clear what belongs to another plan.
  bool finished = false;
  collective_usage_check([&] {
    if (d.rank != 0) return;
    std::error_code ec;
    fs::create_directories(work, ec);
    if (ec) throw UsageError(o.output + ": cannot create the output folder: " + ec.message());
    json m = read_json(out / "manifest.json");
    if (m.is_object() && m.value("plan", "") == plan_id) {
      finished = true;
      for (auto& j : jobs) finished = finished && fs::exists(out / j.name());
      if (finished) return;
    }
    fs::remove(out / "manifest.json", ec);
    const std::regex shard_re(R"((train|test)-\d{5}-of-(\d{5})\.h5)");
    for (auto& e : fs::directory_iterator(out, ec)) {
      std::smatch m2;
      std::string name = e.path().filename().string();
      if (!std::regex_match(name, m2, shard_re)) continue;
      const int count = std::stoi(m2[2]);
      if (count != (m2[1] == "train" ? jobs.front().count : jobs.back().count)) fs::remove(e.path(), ec);
    }
  });
  if (dist_any(finished)) {
    log_info("prepare: " + o.output + " already holds this dataset (manifest.json, plan " + plan_id + "); nothing to do");
    return;
  }

  ImageConvertOptions copt;
  copt.size = o.size;
  copt.channels = o.channels;
  copt.limits.max_pixels = o.max_pixels;
  copt.encoded = o.storage == "encoded";
  copt.max_side = o.max_side;
  copt.threads = o.threads > 0 ? o.threads
                               : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / std::max(1, d.local_size));
  DatasetInfo info;
  info.height = info.width = o.size;
  info.channels = o.channels;
  info.num_classes = static_cast<int>(plan.classes.size());
  info.class_names = plan.classes;
  info.mean.assign(static_cast<size_t>(o.channels), 0.f);  // set when every shard is converted
  info.std.assign(static_cast<size_t>(o.channels), 1.f);
  info.source = "ImageFolder " + o.input + " (" + plan.layout + "), shorter side resized to " + std::to_string(o.size) +
                ", centre crop, " +
                (copt.encoded ? "stored encoded" + (o.max_side > 0 ? strf(" (re-encoded above %d pixels)", o.max_side) : std::string())
                              : std::string("raw uint8"));
  log_info(strf("prepare: %zu classes, %zu train and %zu test files, %d + %d shards, %d ranks x %d decoding threads",
                plan.classes.size(), plan.train.size(), plan.test.size(), jobs.front().count, jobs.back().count,
                d.world_size, copt.threads));

  // 3. Convert, one round of world_size shards at a time.
  const size_t rounds = (jobs.size() + static_cast<size_t>(d.world_size) - 1) / static_cast<size_t>(d.world_size);
  double files_done = 0, skipped = 0, resumed = 0;
  auto last_print = SteadyClock::now();
  for (size_t r = 0; r < rounds; ++r) {
    const size_t j = r * static_cast<size_t>(d.world_size) + static_cast<size_t>(d.rank);
    double mine = 0, mine_skipped = 0, mine_resumed = 0;
    collective_usage_check([&] {
      if (j >= jobs.size()) return;
      const ShardJob& job = jobs[j];
      const auto& files = job.split == std::string("train") ? plan.train : plan.test;
      const fs::path staged = work / (job.name() + ".staged"), sidecar = work / (job.name() + ".json");
      mine = static_cast<double>(job.end - job.begin);
      json prev = read_json(sidecar);
      if (prev.is_object() && prev.value("plan", "") == plan_id && (fs::exists(staged) || fs::exists(out / job.name()))) {
        mine_resumed = mine;
        mine_skipped = static_cast<double>(prev["skipped"].size());
        return;
      }
      ConvertedShard c = convert_image_files(std::span(files).subspan(job.begin, job.end - job.begin), copt);
      if (o.strict && !c.skipped.empty())
        throw UsageError(fs::path(o.input).append(c.skipped.front().first).string() + ": " + c.skipped.front().second +
                         " (--strict: no file is skipped)");
      write_dataset_shard(staged.string(), info, job.split, job.index, job.count, c.images, c.labels, o.gzip,
                          copt.encoded ? &c.encoded : nullptr);
      json s = {{"plan", plan_id}, {"split", job.split}, {"shard", job.index}, {"files", {job.begin, job.end}},
                {"sum", c.sum}, {"sum_sq", c.sum_sq}, {"samples", json::array()}, {"skipped", json::array()}};
      for (size_t i = 0; i < c.kept.size(); ++i) s["samples"].push_back({c.kept[i], c.labels[i]});
      for (auto& [rel, why] : c.skipped) s["skipped"].push_back({rel, why});
      write_text_atomic(sidecar, s.dump());
      mine_skipped = static_cast<double>(c.skipped.size());
    });
    files_done += dist_sum(mine);
    skipped += dist_sum(mine_skipped);
    resumed += dist_sum(mine_resumed);
    if (seconds_since(last_print) >= 5 || r + 1 == rounds) {
      last_print = SteadyClock::now();
      const double secs = seconds_since(t0), fresh = files_done - resumed;
      const double rate = secs > 0 ? fresh / secs : 0;
      log_info(strf("prepare: %.0f of %zu files (%.0f%%), %.0f files/s, ETA %.0f s, skipped %.0f%s", files_done,
                    total_files, 100.0 * files_done / std::max<size_t>(1, total_files), rate,
                    rate > 0 ? (static_cast<double>(total_files) - files_done) / rate : 0.0, skipped,
                    resumed > 0 ? strf(" (%.0f resumed from an earlier run)", resumed).c_str() : ""));
    }
  }

  // 4. The train split's statistics from every sidecar (the same sums in the same order on every rank).
  std::vector<float> mean(static_cast<size_t>(o.channels)), stdev(static_cast<size_t>(o.channels));
  collective_usage_check([&] {
    std::vector<long double> s(mean.size(), 0), s2(mean.size(), 0);
    long double count = 0;
    for (auto& job : jobs) {
      if (job.split != std::string("train")) continue;
      json sc = read_json(work / (job.name() + ".json"));
      if (!sc.is_object() || sc.value("plan", "") != plan_id)
        throw UsageError((work / (job.name() + ".json")).string() + ": missing or from another plan after every rank finished");
      for (size_t c = 0; c < mean.size(); ++c) {
        s[c] += sc["sum"][c].get<uint64_t>();
        s2[c] += sc["sum_sq"][c].get<uint64_t>();
      }
      count += static_cast<long double>(sc["samples"].size()) * o.size * o.size;
    }
    if (count == 0) throw UsageError(o.input + ": not one train image could be decoded (see the skipped files above)");
    for (size_t c = 0; c < mean.size(); ++c) {
      long double m = s[c] / (count * 255.0L), m2 = s2[c] / (count * 255.0L * 255.0L);
      mean[c] = static_cast<float>(m);
      stdev[c] = static_cast<float>(std::sqrt(std::max(0.0L, m2 - m * m)));
    }
  });

  // 5. Statistics into this rank's shards, then into place.
  collective_usage_check([&] {
    for (size_t j = static_cast<size_t>(d.rank); j < jobs.size(); j += static_cast<size_t>(d.world_size)) {
      const fs::path staged = work / (jobs[j].name() + ".staged");
      if (!fs::exists(staged)) continue;  // renamed by an earlier, interrupted run
      set_shard_statistics(staged.string(), mean, stdev);
      std::error_code ec;
      fs::rename(staged, out / jobs[j].name(), ec);
      if (ec) throw RuntimeError("cannot rename " + staged.string() + ": " + ec.message());
    }
  });
  if (d.rank != 0) return;

  // 6. The listings and the manifest (last: its presence means the dataset is complete).
  std::string classes_txt, skipped_tsv = "split\tfile\treason\n";
  for (size_t c = 0; c < plan.classes.size(); ++c) classes_txt += std::to_string(c) + "\t" + tsv_field(plan.classes[c]) + "\n";
  json manifest = {{"format", "imagefolder"}, {"plan", plan_id}, {"input", o.input}, {"layout", plan.layout},
                   {"size", o.size}, {"channels", o.channels}, {"storage", o.storage}, {"max_side", o.max_side}, {"classes", plan.classes},
                   {"mean", mean}, {"std", stdev}, {"splits", json::object()}};
  int64_t skipped_total = 0;
  for (const char* split : {"train", "test"}) {
    std::string samples = "index\tlabel\tfile\n";
    int64_t index = 0, n_skipped = 0, shards = 0;
    for (auto& job : jobs) {
      if (job.split != split) continue;
      ++shards;
      json sc = read_json(work / (job.name() + ".json"));
      for (auto& s : sc["samples"])
        samples += std::to_string(index++) + "\t" + std::to_string(s[1].get<int>()) + "\t" + tsv_field(s[0]) + "\n";
      for (auto& s : sc["skipped"]) {
        skipped_tsv += std::string(split) + "\t" + tsv_field(s[0]) + "\t" + tsv_field(s[1]) + "\n";
        ++n_skipped;
      }
    }
    write_text_atomic(out / (std::string("samples-") + split + ".tsv"), samples);
    manifest["splits"][split] = {{"samples", index}, {"skipped", n_skipped}, {"shards", shards}};
    skipped_total += n_skipped;
    log_info(strf("prepare: %s: %lld samples in %lld shards, %lld files skipped", split, static_cast<long long>(index),
                  static_cast<long long>(shards), static_cast<long long>(n_skipped)));
  }
  write_text_atomic(out / "classes.txt", classes_txt);
  write_text_atomic(out / "skipped.tsv", skipped_tsv);
  write_text_atomic(out / "manifest.json", manifest.dump(2) + "\n");
  std::error_code ec;
  fs::remove_all(work, ec);
  std::string stats = "prepare: train mean/std per channel:";
  for (size_t c = 0; c < mean.size(); ++c) stats += strf(" %.6f/%.6f", mean[c], stdev[c]);
  log_info(stats);
  if (skipped_total > 0)
    log_warn(strf("prepare: %lld files skipped (not decodable); each with its reason in %s", static_cast<long long>(skipped_total),
                  (out / "skipped.tsv").c_str()));
  log_info(strf("prepare: done in %.1f s; %s", seconds_since(t0), o.output.c_str()));
}

}  // namespace ht
