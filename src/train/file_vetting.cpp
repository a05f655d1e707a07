// File vetting in child processes (src/train/file_vetting.hpp): time limits, verdict texts, the
// verdict cache, and the spread of files over the ranks.
#include "src/train/file_vetting.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "mpi/dist.hpp"
#include "base/child_process.hpp"
#include "base/error.hpp"
#include "base/hash.hpp"
#include "src/train/config.hpp"

namespace fs = std::filesystem;

namespace ht {

namespace {

// What identifies a file's content for the cache (and for comparing the ranks' views).
struct FileId {
  bool exists = false;
  uint64_t size = 0, ino = 0, dev = 0;
  int64_t mtime_ns = 0;
};

FileId file_id(const std::string& path) {
  FileId id;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return id;
  id.exists = true;
  id.size = static_cast<uint64_t>(st.st_size);
  id.ino = st.st_ino;
  id.dev = st.st_dev;
  id.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return id;
}

// The executable's identity: a cached verdict holds only for the reader that made it.
std::string exe_id() {
  const FileId e = file_id("/proc/self/exe");
  return std::to_string(e.size) + ":" + std::to_string(e.mtime_ns) + ":" + std::to_string(e.ino);
}

// One cache line: "EXE\tSIZE\tMTIME_NS\tINODE\tDEVICE\tABSOLUTE_PATH".
std::string cache_key(const std::string& exe, const std::string& path, const FileId& id) {
  std::error_code ec;
  const std::string abs = fs::absolute(path, ec).lexically_normal().string();
  return exe + "\t" + std::to_string(id.size) + "\t" + std::to_string(id.mtime_ns) + "\t" + std::to_string(id.ino) +
         "\t" + std::to_string(id.dev) + "\t" + abs;
}

std::set<std::string> read_cache(const std::string& path) {
  std::set<std::string> keys;
  if (path.empty()) return keys;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) keys.insert(line);
  return keys;
}

// Rewrites the cache atomically (temporary name, rename) with `keys`; best effort: a run directory
// that cannot be written only costs a re-vetting next time.
void write_cache(const std::string& path, const std::set<std::string>& keys) {
  if (path.empty()) return;
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    for (const auto& k : keys) out << k << "\n";
    if (!out) {
      fs::remove(tmp, ec);
      return;
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) fs::remove(tmp, ec);
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  const std::string prefix = "hpctrain: error: ";
  if (s.rfind(prefix, 0) == 0) s = s.substr(prefix.size());
  return s;
}

// "AddressSanitizer: BUS on unknown address" from a sanitizer's report in `err` (the first line of
// "ERROR: AddressSanitizer: ..." up to its " (pc" details, or a UBSan "runtime error: ..."); "" when
// `err` holds none. One line for the message instead of the whole report.
std::string sanitizer_report(const std::string& err) {
  for (const char* key : {"ERROR: AddressSanitizer: ", "ERROR: LeakSanitizer: ", "runtime error: "}) {
    size_t at = err.find(key);
    if (at == std::string::npos) continue;
    size_t from = err.rfind("ERROR: ", at) == at ? at + 7 : at;
    size_t end = err.find_first_of("\n", from);
    std::string line = err.substr(from, end == std::string::npos ? std::string::npos : end - from);
    if (size_t pc = line.find(" (pc "); pc != std::string::npos) line.resize(pc);
    if (std::string(key) == "runtime error: ") line = "UndefinedBehaviorSanitizer: " + line;
    return line;
  }
  return "";
}

std::string seconds_text(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", s);
  return b;
}

// How many children a rank runs at once: its share of the host's cores, at most 4.
int parallel_children() {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::clamp(cores / std::max(1, dist().local_size), 1, 4);
}

}  // namespace

VetOptions vet_options(const Config& cfg) {
  VetOptions o;
  o.enabled = cfg.verify.enabled;
  o.timeout_s = cfg.verify.timeout_s;
  o.min_mb_per_s = cfg.verify.min_mb_per_s;
  o.cache_path = (fs::path(cfg.run.dir) / "verified.tsv").string();
  return o;
}

double vet_time_limit(const VetOptions& opt, uint64_t bytes) {
  return opt.timeout_s + static_cast<double>(bytes) / (opt.min_mb_per_s * 1e6);
}

VetVerdict vet_file(const std::string& path, const VetOptions& opt) {
  VetVerdict v;
  const FileId id = file_id(path);
  ChildOptions co;
  co.timeout_s = vet_time_limit(opt, id.size);
  // Address-space cap of the child: the checkpoint reader holds the whole file in memory.
  const uint64_t cap = (uint64_t{4} << 30) + 4 * id.size;
  ChildResult r;
  try {
    r = run_self({"verify", "--child", "--parent", std::to_string(::getpid()), "--max-address-bytes",
                  std::to_string(cap), path},
                 co);
  } catch (const std::exception& e) {
    v.runtime = true;
    v.message = path + ": cannot vet the file: " + e.what();
    return v;
  }
  v.seconds = r.seconds;
  const std::string err = trimmed(r.err);
  switch (r.end) {
    case ChildResult::End::exited:
      if (r.code == 0 || (opt.reject_only_unsafe && (r.code == kExitUsage || r.code == kExitRuntime))) {
        v.ok = true;
        v.message = err;
      } else if (r.code == kExitUsage) {
        v.message = err.empty() ? path + ": rejected by hpctrain verify (no message)" : err;
      } else if (const std::string report = sanitizer_report(err); !report.empty()) {
        // A sanitizer build's child stops at the first memory error (exit 1): a crash all the same.
        v.message = "HDF5 crashed parsing " + path + " (" + report +
                    ", in the vetting process `hpctrain verify`; the trainer did not open the file): the file is "
                    "corrupt; replace it";
      } else {
        v.message = path + ": cannot be read: " + (err.empty() ? "vetting process exited with code " + std::to_string(r.code) : err);
      }
      break;
    case ChildResult::End::signaled:
      v.message = "HDF5 crashed parsing " + path + " (" + signal_name(r.code) +
                  ", in the vetting process `hpctrain verify`; the trainer did not open the file): the file is "
                  "corrupt; replace it";
      break;
    case ChildResult::End::timed_out:
      v.message = "HDF5 parsing " + path + " did not finish in " + seconds_text(co.timeout_s) +
                  " s (verify.timeout_s = " + seconds_text(opt.timeout_s) + " plus " +
                  std::to_string(id.size) + " bytes at verify.min_mb_per_s = " + seconds_text(opt.min_mb_per_s) +
                  "; the vetting process was killed): the file is corrupt (HDF5 loops on some corrupt metadata), or "
                  "the file system is that slow (then raise verify.timeout_s)";
      break;
  }
  return v;
}

std::vector<VetVerdict> vet_files(const std::vector<std::string>& paths, const VetOptions& opt, int width) {
  std::vector<VetVerdict> out(paths.size());
  for (size_t first = 0; first < paths.size(); first += static_cast<size_t>(width)) {
    std::vector<std::future<VetVerdict>> running;
    const size_t end = std::min(paths.size(), first + static_cast<size_t>(width));
    for (size_t i = first; i < end; ++i)
      running.push_back(std::async(std::launch::async, [&, i] { return vet_file(paths[i], opt); }));
    for (size_t i = first; i < end; ++i) out[i] = running[i - first].get();
  }
  return out;
}

void vet_file_or_throw(const std::string& path, const VetOptions& opt) {
  if (!opt.enabled || !file_id(path).exists) return;  // a missing file: the reader names it
  VetVerdict v = vet_file(path, opt);
  if (v.runtime) throw RuntimeError(v.message);
  if (!v.ok) throw UsageError(v.message);
}

VetSummary vet_files_collective(const std::vector<std::string>& files, const VetOptions& opt) {
  VetSummary sum;
  sum.files = static_cast<int>(files.size());
  if (!opt.enabled || files.empty()) return sum;
  const auto t0 = std::chrono::steady_clock::now();
  const DistContext& d = dist();
  const size_t n = files.size();
  std::vector<FileId> ids(n);
  Fnv1a h;
  for (size_t i = 0; i < n; ++i) {
    ids[i] = file_id(files[i]);
    h.update(files[i] + "\t" + std::to_string(ids[i].size) + "\t" + std::to_string(ids[i].mtime_ns) + "\n");
  }
  const long long fp = static_cast<long long>(h.value() >> 2);
  const bool same = d.world_size == 1 || dist_max(fp) == -dist_max(-fp);
  // Rank 0's cache decides which files need a child when every rank sees the same files.
  const std::string exe = exe_id();
  std::set<std::string> cache = d.rank == 0 ? read_cache(opt.cache_path) : std::set<std::string>{};
  std::vector<char> need(n, 1);
  for (size_t i = 0; i < n; ++i)
    if (!ids[i].exists || (d.rank == 0 && cache.count(cache_key(exe, files[i], ids[i])))) need[i] = 0;
  // Rank 0 read its cache while the others waited: no time limit while every peer answers.
  if (same) dist_broadcast(need, "vetting: rank 0's list of files to vet (MPI_Bcast)", WaitKind::while_peers_answer);
  // Largest files first, each to the rank with the fewest bytes so far.
  std::vector<size_t> order;
  for (size_t i = 0; i < n; ++i)
    if (need[i]) order.push_back(i);
  sum.vetted = static_cast<int>(order.size());
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ids[a].size > ids[b].size; });
  std::vector<uint64_t> load(static_cast<size_t>(d.world_size), 0);
  std::vector<size_t> mine;
  for (size_t i : order) {
    int r = d.rank;
    if (same) {
      r = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
      load[static_cast<size_t>(r)] += ids[i].size + 1;
    }
    if (r == d.rank) mine.push_back(i);
  }
  std::vector<std::string> paths;
  for (size_t i : mine) paths.push_back(files[i]);
  const std::vector<VetVerdict> verdicts = vet_files(paths, opt, parallel_children());
  // Agreement: every rank's failures ("INDEX\tKIND\tMESSAGE\n", KIND u = usage, r = runtime) to all.
  std::string text;
  for (size_t k = 0; k < mine.size(); ++k)
    if (!verdicts[k].ok) {
      std::string m = verdicts[k].message;
      std::replace(m.begin(), m.end(), '\n', ' ');
      text += std::to_string(mine[k]) + "\t" + (verdicts[k].runtime ? "r" : "u") + "\t" + m + "\n";
    }
  // Each rank vetted its own share in child processes, taking its own time: no time limit while
  // every peer answers.
  std::string all;
  for (const std::string& s : dist_allgather_strings(text, "vetting: the ranks' verdicts (MPI_Allgatherv)",
                                                     WaitKind::while_peers_answer))
    all += s;
  // The first bad file in list order (the same on every rank), plus how many others failed.
  std::map<size_t, std::pair<char, std::string>> bad;
  std::istringstream lines(all);
  std::string line;
  while (std::getline(lines, line)) {
    auto t1 = line.find('\t'), t2 = line.find('\t', t1 + 1);
    if (t1 == std::string::npos || t2 == std::string::npos) continue;
    size_t i = std::stoul(line.substr(0, t1));
    if (!bad.count(i)) bad[i] = {line[t1 + 1], line.substr(t2 + 1)};
  }
  if (d.rank == 0 && same) {
    bool changed = false;
    for (size_t i = 0; i < n; ++i)
      if (ids[i].exists && !bad.count(i) && cache.insert(cache_key(exe, files[i], ids[i])).second) changed = true;
    // Entries of other executables or of files that changed are dropped when the cache is rewritten.
    if (changed) {
      std::set<std::string> keep;
      for (const auto& k : cache)
        if (k.rfind(exe + "\t", 0) == 0) keep.insert(k);
      write_cache(opt.cache_path, keep);
    }
  }
  sum.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (bad.empty()) return sum;
  std::string msg = bad.begin()->second.second;
  if (bad.size() > 1) {
    msg += " (and " + std::to_string(bad.size() - 1) + " more bad file(s):";
    for (auto it = std::next(bad.begin()); it != bad.end(); ++it) msg += " " + files[it->first];
    msg += ")";
  }
  const bool runtime = bad.begin()->second.first == 'r';
  if (runtime) throw RuntimeError(msg);
  throw CollectiveUsageError(msg, true);
}

std::vector<std::string> dataset_shard_files(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  static const std::regex re(R"((train|test)-\d{5}-of-\d{5}\.h5)");
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec))
    if (std::regex_match(it->path().filename().string(), re) && it->is_regular_file(ec))
      out.push_back(it->path().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace ht
