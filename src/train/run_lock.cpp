#include "src/train/run_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <sstream>
#include <thread>

#include "base/error.hpp"
#include "base/key_value.hpp"
#include "base/log.hpp"

namespace ht {
namespace {

std::string read_all(int fd) {
  std::string s;
  char buf[512];
  if (lseek(fd, 0, SEEK_SET) < 0) return s;
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0 && s.size() < 4096) s.append(buf, static_cast<size_t>(n));
  return s;
}

std::string now_utc() {
  char buf[32];
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

std::string RunDirLock::describe_holder(const std::string& text) {
  std::map<std::string, std::string> kv = parse_key_value_lines(text);
  if (kv.empty()) return "a process that has not recorded itself yet";
  auto get = [&](const char* k) { return kv.count(k) ? kv[k] : std::string("?"); };
  return "host " + get("host") + ", process " + get("pid") + ", job " + get("job") + ", since " + get("since");
}

RunDirLock::RunDirLock(const std::string& run_dir, double wait_s) {
  std::error_code ec;
  std::filesystem::create_directories(run_dir, ec);
  const std::string path = run_dir + "/.owner";
  fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw RuntimeError("run directory lock: cannot create " + path + ": " + std::strerror(errno));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
  bool waited = false;
  while (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) {
      const int e = errno;
      close(fd_);
      fd_ = -1;
      throw RuntimeError("run directory lock: flock(" + path + ") failed: " + std::strerror(e));
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      const std::string holder = describe_holder(read_all(fd_));
      close(fd_);
      fd_ = -1;
      throw UsageError("run.dir = " + run_dir + " is in use by another job (" + holder + ", recorded in " + path +
                       "); waited " + std::to_string(static_cast<int>(wait_s)) +
                       " s. Run one job per run directory: wait for it to end, stop it, or choose another run.dir");
    }
    if (!waited) {  // say it once: a silent wait of wait_s looks like a hang
      const std::string line = "hpctrain: run.dir = " + run_dir + " is locked by another job (" +
                               describe_holder(read_all(fd_)) + "); waiting up to " +
                               std::to_string(static_cast<int>(wait_s)) + " s for it to end";
      log_raw_err(line);
    }
    waited = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  const char* job = std::getenv("SLURM_JOB_ID");
  std::ostringstream os;
  os << "host=" << host << "\npid=" << getpid() << "\njob=" << (job ? job : "-") << "\nsince=" << now_utc() << "\n";
  const std::string text = os.str();
  if (ftruncate(fd_, 0) != 0 || pwrite(fd_, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
    // The lock is held; only the record of who holds it is missing. Not worth failing the run.
  }
}

RunDirLock::~RunDirLock() {
  if (fd_ >= 0) close(fd_);  // closing the descriptor releases the flock
}

}  // namespace ht
