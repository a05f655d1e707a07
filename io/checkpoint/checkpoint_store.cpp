// The run-directory store of checkpoints (io/checkpoint/checkpoint_store.hpp): file names, the atomic publish
// with LATEST, pruning, listing, leftover temporaries, quarantine and the free-space check.
#include "io/checkpoint/checkpoint_store.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "io/h5.hpp"
#include "base/error.hpp"

namespace fs = std::filesystem;

namespace ht {
namespace {

using Clock = std::chrono::steady_clock;
double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Failures of the store's own file operations carry errno text in an H5Fail (io/h5.hpp), like the
// file writer's, so that one handler names the checkpoint, the bytes needed and the cause.
void fsync_path(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), (directory ? O_DIRECTORY : 0) | O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw H5Fail("open " + path + " for fsync: " + std::strerror(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) throw H5Fail("fsync " + path + ": " + std::strerror(err));
}

// Writes a small text file atomically: temporary name, fsync, rename, directory fsync.
void write_small_file_atomic(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw H5Fail("create " + tmp + ": " + std::strerror(errno));
  ssize_t w = ::write(fd, text.data(), text.size());
  int err = errno;
  bool ok = w == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  if (!ok && w >= 0) err = errno ? errno : EIO;
  ::close(fd);
  if (!ok) {
    ::unlink(tmp.c_str());
    throw H5Fail("write " + tmp + ": " + std::strerror(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    err = errno;
    ::unlink(tmp.c_str());
    throw H5Fail("rename " + tmp + " to " + path + ": " + std::strerror(err));
  }
  fsync_path(fs::path(path).parent_path().string().empty() ? "." : fs::path(path).parent_path().string(), true);
}

bool is_temporary_name(const std::string& name) { return name.find(".tmp.") != std::string::npos; }

}  // namespace

std::string checkpoint_dir(const std::string& run_dir) { return (fs::path(run_dir) / "checkpoints").string(); }

std::string checkpoint_path(const std::string& run_dir, int64_t step) {
  char name[64];
  std::snprintf(name, sizeof name, "step-%08" PRId64 ".h5", step);
  return (fs::path(checkpoint_dir(run_dir)) / name).string();
}

int64_t checkpoint_step_from_name(const std::string& filename) {
  // step-<digits>.h5 exactly; temporary (".tmp.PID") and quarantined (".bad") names do not match.
  if (filename.size() < 9 || filename.rfind("step-", 0) != 0 || filename.substr(filename.size() - 3) != ".h5")
    return -1;
  std::string digits = filename.substr(5, filename.size() - 8);
  if (digits.empty() || digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return -1;
  return std::stoll(digits);
}

void check_free_space(const std::string& dir, size_t bytes_needed) {
  size_t avail = available_bytes(dir);
  if (avail < bytes_needed)
    throw RuntimeError("not enough disk space for checkpoints in " + dir + ": a checkpoint needs " +
                       checkpoint_size_text(bytes_needed) + ", " + checkpoint_size_text(avail) + " available");
}

CheckpointWriteResult write_checkpoint(const std::string& run_dir, int64_t step, const CheckpointData& d,
                                       const CheckpointWriteOptions& opt) {
  auto t0 = Clock::now();
  CheckpointWriteResult r;
  std::string dir = checkpoint_dir(run_dir);
  r.path = checkpoint_path(run_dir, step);
  size_t need = checkpoint_expected_bytes(d);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw RuntimeError("cannot create checkpoint directory " + dir + ": " + ec.message());
  if (::access(dir.c_str(), W_OK) != 0)
    throw RuntimeError("cannot write checkpoint " + r.path + " (" + checkpoint_size_text(need) +
                       " needed): directory is not writable: " + std::strerror(errno));
  if (opt.check_space) {
    size_t avail = available_bytes(dir);
    if (avail < need)
      throw RuntimeError("cannot write checkpoint " + r.path + ": disk full: " + checkpoint_size_text(need) + " needed, " +
                         checkpoint_size_text(avail) + " available in " + dir);
  }
  std::string tmp = r.path + ".tmp." + std::to_string(::getpid());
  Clock::time_point t_file, t_published;
  {
    try {
      CheckpointFileTimes ft = stream_checkpoint_file(tmp, d);
      r.data_ms = ft.data_ms;
      r.fsync_ms = ft.fsync_ms;
      t_file = Clock::now();
      if (::rename(tmp.c_str(), r.path.c_str()) != 0)
        throw H5Fail("rename " + tmp + " to " + r.path + ": " + std::strerror(errno));
      fsync_path(dir, true);
    } catch (const H5Fail& e) {
      ::unlink(tmp.c_str());
      throw RuntimeError("cannot write checkpoint " + r.path + " (" + checkpoint_size_text(need) + " needed, " +
                         checkpoint_size_text(available_bytes(dir)) + " available in " + dir + "): " + e.what());
    }
  }
  r.bytes = static_cast<size_t>(fs::file_size(r.path, ec));
  try {
    write_small_file_atomic((fs::path(run_dir) / "LATEST").string(),
                            "checkpoints/" + fs::path(r.path).filename().string() + "\n");
  } catch (const H5Fail& e) {
    // The checkpoint itself is complete and durable (readers scan by step), but say so loudly.
    throw RuntimeError("checkpoint " + r.path + " written, but LATEST could not be updated: " + e.what());
  }
  t_published = Clock::now();
  // Prune: keep the newest keep_last plus every keep_every-th; never the one just written.
  auto all = list_checkpoints(run_dir);
  size_t keep_from = all.size() > static_cast<size_t>(opt.keep_last) ? all.size() - static_cast<size_t>(opt.keep_last) : 0;
  for (size_t i = 0; i < keep_from; ++i) {
    auto& [s, p] = all[i];
    if (s == step || (opt.keep_every > 0 && s % opt.keep_every == 0)) continue;
    if (fs::remove(p, ec)) r.removed.push_back(p);
  }
  auto t_end = Clock::now();
  r.publish_ms = ms_between(t_file, t_published);
  r.prune_ms = ms_between(t_published, t_end);
  r.write_ms = ms_between(t0, t_end);
  return r;
}

std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& run_dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  for (auto it = fs::directory_iterator(checkpoint_dir(run_dir), ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    int64_t s = checkpoint_step_from_name(it->path().filename().string());
    if (s >= 0 && it->is_regular_file(ec)) out.emplace_back(s, it->path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> clean_temporary_files(const std::string& run_dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& d : {checkpoint_dir(run_dir), run_dir}) {
    std::vector<fs::path> victims;
    for (auto it = fs::directory_iterator(d, ec); !ec && it != fs::directory_iterator(); it.increment(ec))
      if (is_temporary_name(it->path().filename().string()) && it->is_regular_file(ec)) victims.push_back(it->path());
    for (auto& p : victims)
      if (fs::remove(p, ec)) removed.push_back(p.string());
  }
  return removed;
}

std::optional<LoadedCheckpoint> load_latest_checkpoint(const std::string& run_dir, bool quarantine,
                                                       const std::function<void(const std::string&)>& warn,
                                                       const CheckpointCheck& check,
                                                       std::vector<std::string>* rejected,
                                                       const std::function<void(const std::string&)>& vet) {
  auto all = list_checkpoints(run_dir);
  LoadedCheckpoint out;
  std::vector<std::string> bad_paths;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      if (vet) vet(it->second);
      // The file-name step, the structure and `check` are read_checkpoint_file's (one verdict).
      out.data = read_checkpoint_file(it->second, check);
      out.path = it->second;
      break;
    } catch (const CheckpointRefusal&) {
      throw;  // the run refuses every checkpoint alike: nothing to fall back to, nothing to quarantine
    } catch (const std::exception& e) {
      out.rejected.push_back(e.what());
      bad_paths.push_back(it->second);
      if (warn) warn(std::string(e.what()) + "; trying the previous checkpoint");
    }
  }
  if (rejected) *rejected = out.rejected;
  if (out.path.empty()) return std::nullopt;
  if (quarantine) {
    std::error_code ec;
    for (auto& p : bad_paths) {
      fs::rename(p, p + ".bad", ec);
      if (warn && !ec) warn("moved the invalid checkpoint aside: " + p + ".bad");
    }
  }
  return out;
}

}  // namespace ht
