#include "src/train/stage.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "mpi/dist.hpp"
#include "base/clock.hpp"
#include "base/hash.hpp"
#include "base/log.hpp"
#include "base/test_faults.hpp"
#include "src/train/config.hpp"
#include "src/train/file_vetting.hpp"

namespace fs = std::filesystem;

namespace ht {
namespace {

struct FileFacts {
  bool exists = false;
  uint64_t size = 0;
  struct timespec mtime {};
};

FileFacts facts(const std::string& p) {
  FileFacts f;
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return f;
  f.exists = true;
  f.size = static_cast<uint64_t>(st.st_size);
  f.mtime = st.st_mtim;
  return f;
}

bool same(const FileFacts& a, const FileFacts& b) {
  return a.exists && b.exists && a.size == b.size && a.mtime.tv_sec == b.mtime.tv_sec &&
         a.mtime.tv_nsec == b.mtime.tv_nsec;
}

std::string bytes_text(double b) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.0f bytes (%.1f MiB)", b, b / (1 << 20));
  return buf;
}

/// Copies src to dst (a temporary name), then checks the size and gives it src's mtime. Throws
/// UsageError naming `target` and `need` on a write error (ENOSPC included).
void copy_one(const std::string& src, const std::string& dst, const FileFacts& sf, const std::string& target,
              uint64_t need) {
  auto fail = [&](const std::string& what, int err) {
    ::unlink(dst.c_str());
    throw UsageError("data.stage_dir: cannot stage into " + target + ": " + what + ": " + std::strerror(err) + " (" + bytes_text(static_cast<double>(need)) +
                     " needed for the shards still to copy)");
  };
  const int in = ::open(src.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) throw UsageError("data.dir: cannot read shard " + src + ": " + std::strerror(errno));
  const int out = ::open(dst.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0) {
    const int e = errno;
    ::close(in);
    fail("cannot create " + dst, e);
  }
  std::vector<char> buf(size_t{4} << 20);
  for (;;) {
    const ssize_t n = ::read(in, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(in), ::close(out), ::unlink(dst.c_str());
      throw UsageError("data.dir: cannot read shard " + src + ": " + std::strerror(e));
    }
    if (n == 0) break;
    for (ssize_t off = 0; off < n;) {
      const ssize_t w = ::write(out, buf.data() + off, static_cast<size_t>(n - off));
      if (w < 0) {
        if (errno == EINTR) continue;
        const int e = errno;
        ::close(in), ::close(out);
        fail("writing " + dst, e);
      }
      off += w;
    }
  }
  ::close(in);
  if (::fsync(out) != 0 || ::close(out) != 0) fail("writing " + dst, errno);
  const FileFacts df = facts(dst);
  if (df.size != sf.size)
    fail("copy of " + src + " has " + std::to_string(df.size) + " bytes, the shard " + std::to_string(sf.size), EIO);
  const struct timespec times[2] = {sf.mtime, sf.mtime};
  if (::utimensat(AT_FDCWD, dst.c_str(), times, 0) != 0) fail("setting the time of " + dst, errno);
}

}  // namespace

std::string staged_data_dir(const std::string& stage_dir, const std::string& data_dir) {
  std::error_code ec;
  fs::path abs = fs::weakly_canonical(fs::absolute(data_dir), ec);
  if (ec) abs = fs::absolute(data_dir);
  std::string name = abs.filename().string();
  if (name.empty()) name = abs.parent_path().filename().string();
  return (fs::path(stage_dir) / (name + "-" + hex64(fnv1a(abs.string())))).string();
}

StageReport stage_files(const std::vector<std::string>& files, const std::string& target, double free_bytes) {
  StageReport r;
  r.dir = target;
  r.files = static_cast<int>(files.size());
  std::error_code ec;
  fs::create_directories(target, ec);
  if (ec) throw UsageError("data.stage_dir: cannot create " + target + ": " + ec.message());
  std::vector<std::pair<std::string, FileFacts>> todo;
  uint64_t need = 0;
  for (const auto& src : files) {
    const FileFacts sf = facts(src);
    if (!sf.exists) throw UsageError("data.dir: cannot read shard " + src + ": " + std::strerror(errno));
    const std::string dst = (fs::path(target) / fs::path(src).filename()).string();
    if (same(sf, facts(dst))) continue;
    todo.emplace_back(src, sf);
    need += sf.size;
  }
  if (todo.empty()) return r;
  if (free_bytes < 0) {
    struct statvfs sv {};
    if (::statvfs(target.c_str(), &sv) == 0) free_bytes = static_cast<double>(sv.f_bavail) * static_cast<double>(sv.f_frsize);
  }
  // Copies replaced in place free their old bytes only after the rename: count what is there now.
  if (free_bytes >= 0 && static_cast<double>(need) > free_bytes)
    throw UsageError("data.stage_dir: not enough space in " + target + ": " + bytes_text(static_cast<double>(need)) +
                     " needed for " + std::to_string(todo.size()) + " shard(s), " + bytes_text(free_bytes) + " free");
  const auto t0 = SteadyClock::now();
  uint64_t left = need;
  for (const auto& [src, sf] : todo) {
    const std::string dst = (fs::path(target) / fs::path(src).filename()).string();
    const std::string tmp = dst + ".tmp." + dist().host + "." + std::to_string(::getpid());
    copy_one(src, tmp, sf, target, left);
    fs::rename(tmp, dst, ec);
    if (ec) {
      ::unlink(tmp.c_str());
      throw UsageError("data.stage_dir: cannot stage into " + target + ": renaming " + tmp + ": " + ec.message());
    }
    left -= sf.size;
    r.copied++;
    r.bytes_copied += sf.size;
  }
  r.seconds = seconds_since(t0);
  return r;
}

std::string stage_dataset(const Config& cfg) {
  if (cfg.data.synthetic || cfg.data.stage_dir.empty()) return cfg.data.dir;
  const std::vector<std::string> files = dataset_shard_files(cfg.data.dir);
  const std::string target = staged_data_dir(cfg.data.stage_dir, cfg.data.dir);
  if (files.empty()) return cfg.data.dir;  // the reader names what is missing in data.dir
  const DistContext& d = dist();
  StageReport r;
  collective_usage_check([&] {
    if (d.local_rank != 0) return;
    const double fake_free = TestFaults::get().number("stage.free_bytes", -1);
    r = stage_files(files, target, fake_free);
  });
  if (d.local_rank == 0) {
    char line[512];
    const double mb_s = r.seconds > 0 ? static_cast<double>(r.bytes_copied) / r.seconds / 1e6 : 0;
    std::snprintf(line, sizeof line,
                  "hpctrain: stage: host %s (ranks of this node: %d): %d of %d shard(s) copied to %s, %.1f MB in %.2f s "
                  "(%.0f MB/s), %d already staged and identical\n",
                  d.host.c_str(), d.local_size, r.copied, r.files, target.c_str(),
                  static_cast<double>(r.bytes_copied) / 1e6, r.seconds, mb_s, r.files - r.copied);
    log_info_every_rank(line);  // one line per node (its local rank 0)
  }
  return target;
}

}  // namespace ht
