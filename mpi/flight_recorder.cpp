// The flight recorder (flight_recorder.hpp): a ring of kFlightEntries entries under one mutex.
#include "mpi/flight_recorder.hpp"

#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <string_view>
#include <nlohmann/json.hpp>

#include "mpi/whereabouts.hpp"

namespace fs = std::filesystem;

namespace ht {
namespace {

struct Entry {
  uint64_t seq = 0;  // 0: empty
  const char* what = nullptr;
  uint64_t occurrence = 0;  // the how-manieth wait of this name on this rank: the same on every rank
  int64_t step = 0;
  const char* phase = nullptr;
  double t_begin = 0, t_end = 0;  // t_end 0: still waiting
  bool failed = false;            // ended by an error, not completed
  int thread = 0;
};

std::mutex g_mu;
Entry g_ring[kFlightEntries];
std::map<std::string, uint64_t, std::less<>> g_occurrences;  // by name (one text may sit at several addresses)
std::string g_dir;
int g_rank = -1, g_world = 0;
std::string g_host;
std::atomic<int> g_threads{0};
thread_local int t_thread = -1;

double monotonic_s() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

void flight_record_begin(uint64_t seq, const char* what, int64_t step, const char* phase, double t) {
  if (t_thread < 0) t_thread = g_threads.fetch_add(1);
  std::lock_guard lk(g_mu);
  Entry& e = g_ring[seq % kFlightEntries];
  e.seq = seq;
  e.what = what;
  const std::string_view name = what ? what : "?";
  auto it = g_occurrences.find(name);  // no allocation once a name is known
  if (it == g_occurrences.end()) it = g_occurrences.emplace(std::string(name), 0).first;
  e.occurrence = ++it->second;
  e.step = step;
  e.phase = phase;
  e.t_begin = t;
  e.t_end = 0;
  e.failed = false;
  e.thread = t_thread;
}

void flight_record_end(uint64_t seq, double t, bool completed) {
  std::lock_guard lk(g_mu);
  Entry& e = g_ring[seq % kFlightEntries];
  if (e.seq != seq) return;
  e.t_end = t;
  e.failed = !completed;
}

void flight_recorder_set_dir(const std::string& run_dir, int rank, int world_size, const std::string& host) {
  std::lock_guard lk(g_mu);
  g_dir = run_dir;
  g_rank = rank;
  g_world = world_size;
  g_host = host;
}

std::string flight_inspect_hint() {
  std::lock_guard lk(g_mu);
  return g_dir.empty() ? std::string() : "hpctrain inspect --flight " + g_dir;
}

std::string flight_recorder_write(const std::string& name, const std::string& text) noexcept {
  try {
    std::string dir;
    {
      std::lock_guard lk(g_mu);
      dir = g_dir;
    }
    if (dir.empty()) return "";
    const fs::path out = fs::path(dir) / "flight", path = out / name, tmp = out / (name + ".tmp");
    std::error_code ec;
    fs::create_directories(out, ec);
    {
      std::ofstream f(tmp);
      f << text;
      if (!f.good()) return "";
    }
    fs::rename(tmp, path, ec);
    return ec ? std::string() : path.string();
  } catch (...) {
    return "";
  }
}

std::string flight_recorder_dump(const std::string& reason, const std::vector<LostPeer>& lost) noexcept {
  try {
    nlohmann::json j;
    int rank = 0;
    {
      std::lock_guard lk(g_mu);
      if (g_dir.empty()) return "";
      rank = g_rank;
      const double now = monotonic_s();
      const Whereabouts w = whereabouts_now();
      j = {{"format", "hpctrain flight record"}, {"version", 1}, {"rank", g_rank}, {"world_size", g_world},
           {"host", g_host}, {"pid", static_cast<int64_t>(::getpid())}, {"reason", reason},
           {"written_unix_s", static_cast<double>(::time(nullptr))}, {"step", w.step},
           {"phase", w.phase ? w.phase : ""}, {"whereabouts", whereabouts_text()}};
      nlohmann::json lost_json = nlohmann::json::array();
      for (const LostPeer& p : lost) lost_json.push_back({{"rank", p.rank}, {"host", p.host}});
      j["lost"] = std::move(lost_json);
      // Oldest first: the ring from the entry after the newest.
      uint64_t newest = 0;
      for (const Entry& e : g_ring) newest = std::max(newest, e.seq);
      nlohmann::json entries = nlohmann::json::array();
      for (uint64_t s = newest >= kFlightEntries ? newest - kFlightEntries + 1 : 1; s <= newest; ++s) {
        const Entry& e = g_ring[s % kFlightEntries];
        if (e.seq != s) continue;
        const bool done = e.t_end > 0;
        entries.push_back({{"seq", e.seq}, {"what", e.what ? e.what : "?"}, {"occurrence", e.occurrence},
                           {"step", e.step}, {"phase", e.phase ? e.phase : ""}, {"thread", e.thread},
                           {"state", !done ? "waiting" : e.failed ? "failed" : "done"}, {"began_s_ago", now - e.t_begin},
                           {"seconds", (done ? e.t_end : now) - e.t_begin}});
      }
      j["entries"] = std::move(entries);
    }
    char name[32];
    std::snprintf(name, sizeof name, "rank-%05d.json", rank);
    // One item per line: slurm/train.sbatch's watcher looks for a non-empty `lost` list by its line.
    return flight_recorder_write(name, j.dump(1) + "\n");
  } catch (...) {
    return "";
  }
}

}  // namespace ht
