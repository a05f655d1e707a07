// flight_report (flight_report.hpp): reads every rank's flight record and lines them up.
#include "mpi/flight_report.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "base/error.hpp"
#include "base/stats.hpp"

namespace fs = std::filesystem;

namespace ht {
namespace {

struct Wait {
  std::string what, phase;
  uint64_t occurrence = 0;
  int64_t step = 0;
  bool waiting = false;
  double seconds = 0, began_s_ago = 0;
};

struct RankRecord {
  int rank = 0, world_size = 0;
  std::string host, reason, phase, file;
  int64_t step = 0;
  std::vector<Wait> waits;  // oldest first
  std::vector<std::pair<int, std::string>> lost;  // peers found lost (rank, host)
};

RankRecord read_record(const fs::path& p) {
  std::ifstream in(p);
  nlohmann::json j;
  try {
    in >> j;
  } catch (const std::exception& e) {
    throw UsageError(p.string() + ": not a flight record (JSON: " + e.what() + ")");
  }
  auto field = [&](const nlohmann::json& o, const char* k) -> const nlohmann::json& {
    if (!o.is_object() || !o.contains(k)) throw UsageError(p.string() + ": field '" + k + "' missing");
    return o.at(k);
  };
  RankRecord r;
  try {
    if (field(j, "format") != "hpctrain flight record")
      throw UsageError(p.string() + ": field 'format' is " + field(j, "format").dump() + ", not \"hpctrain flight record\"");
    r.file = p.string();
    r.rank = field(j, "rank").get<int>();
    r.world_size = field(j, "world_size").get<int>();
    r.host = field(j, "host").get<std::string>();
    r.reason = field(j, "reason").get<std::string>();
    r.step = field(j, "step").get<int64_t>();
    r.phase = field(j, "phase").get<std::string>();
    for (const auto& e : field(j, "entries")) {
      Wait w;
      w.what = field(e, "what").get<std::string>();
      w.occurrence = field(e, "occurrence").get<uint64_t>();
      w.step = field(e, "step").get<int64_t>();
      w.phase = field(e, "phase").get<std::string>();
      w.waiting = field(e, "state") != "done";  // "waiting", or "failed": ended by an error, never completed
      w.seconds = field(e, "seconds").get<double>();
      w.began_s_ago = field(e, "began_s_ago").get<double>();
      r.waits.push_back(std::move(w));
    }
    if (j.contains("lost"))  // absent in records written before the field existed
      for (const auto& l : j.at("lost")) r.lost.emplace_back(field(l, "rank").get<int>(), field(l, "host").get<std::string>());
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(p.string() + ": a field of the wrong type (" + e.what() + ")");
  }
  constexpr int kMaxWorld = 1 << 24;  // a declared size is checked before anything is sized by it
  if (r.world_size < 1 || r.world_size > kMaxWorld)
    throw UsageError(p.string() + ": world_size " + std::to_string(r.world_size) + " outside [1, " +
                     std::to_string(kMaxWorld) + "]");
  if (r.rank < 0 || r.rank >= r.world_size)
    throw UsageError(p.string() + ": rank " + std::to_string(r.rank) + " outside world_size " + std::to_string(r.world_size));
  return r;
}

std::vector<RankRecord> read_records(const fs::path& dir) {
  std::vector<RankRecord> recs;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("rank-", 0) == 0 && e.path().extension() == ".json") recs.push_back(read_record(e.path()));
  }
  std::sort(recs.begin(), recs.end(), [](const RankRecord& a, const RankRecord& b) { return a.rank < b.rank; });
  return recs;
}

std::string fmt_s(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", s);
  return b;
}

std::string doing(const RankRecord& r) {
  std::string out = "rank " + std::to_string(r.rank) + " (" + r.host + "): " +
                    (r.step > 0 ? "step " + std::to_string(r.step) + ", phase " + (r.phase.empty() ? "?" : r.phase)
                                : std::string("no step yet"));
  const Wait* open = nullptr;
  for (const Wait& w : r.waits)
    if (w.waiting) open = &w;
  if (open)
    return out + "; waiting in '" + open->what + "' #" + std::to_string(open->occurrence) + " for " + fmt_s(open->seconds) +
           " s";
  if (r.waits.empty()) return out + "; no wait on peers recorded";
  const Wait& last = r.waits.back();
  return out + "; in no collective, its last '" + last.what + "' #" + std::to_string(last.occurrence) + " finished " +
         fmt_s(last.began_s_ago - last.seconds) + " s before its record";
}

}  // namespace

std::string flight_report(const std::string& run_dir) {
  const fs::path dir = fs::path(run_dir) / "flight";
  std::vector<RankRecord> recs = read_records(dir);
  if (recs.empty())
    throw UsageError(dir.string() + ": no flight record (rank-*.json); ranks write one on a collective time-out, a "
                     "fatal error or a stop signal once their run directory exists");
  // One run's records: the same world size, each rank once.
  for (size_t i = 1; i < recs.size(); ++i) {
    if (recs[i].world_size != recs[0].world_size)
      throw UsageError(recs[i].file + ": world_size " + std::to_string(recs[i].world_size) + ", but " + recs[0].file +
                       " says " + std::to_string(recs[0].world_size) + " (records of different runs?)");
    if (recs[i].rank == recs[i - 1].rank)
      throw UsageError(recs[i].file + " and " + recs[i - 1].file + " are both rank " + std::to_string(recs[i].rank));
  }
  const int world = recs[0].world_size;
  constexpr size_t kListed = 8;  // lines per list; a large job's records are summarised
  std::set<int> present;
  for (const RankRecord& r : recs) present.insert(r.rank);
  std::vector<int> missing;
  for (int q = 0; q < world; ++q)
    if (!present.count(q)) missing.push_back(q);

  std::string out = "flight records of " + std::to_string(recs.size()) + " of " + std::to_string(world) + " ranks in " +
                    dir.string() + "\n";
  for (size_t i = 0; i < recs.size() && i < kListed; ++i)
    out += "  rank " + std::to_string(recs[i].rank) + " wrote it on: " + recs[i].reason + "\n";
  if (recs.size() > kListed) out += "  and " + std::to_string(recs.size() - kListed) + " more ranks\n";

  // The wait most ranks are in (ties: the earliest step), matched by name and occurrence.
  std::map<std::pair<std::string, uint64_t>, std::vector<const RankRecord*>> open;
  for (const RankRecord& r : recs)
    for (const Wait& w : r.waits)
      if (w.waiting) open[{w.what, w.occurrence}].push_back(&r);
  if (open.empty()) {
    out += "no rank was waiting on peers when it wrote its record:\n";
    for (size_t i = 0; i < recs.size() && i < kListed; ++i) out += "  " + doing(recs[i]) + "\n";
    if (recs.size() > kListed) out += "  and " + std::to_string(recs.size() - kListed) + " more ranks\n";
  } else {
    auto step_of = [&](const auto& group) {
      for (const Wait& w : group.second.front()->waits)
        if (w.waiting && w.what == group.first.first && w.occurrence == group.first.second) return w.step;
      return int64_t{0};
    };
    auto stuck = open.begin();
    for (auto it = std::next(open.begin()); it != open.end(); ++it)
      if (it->second.size() > stuck->second.size() ||
          (it->second.size() == stuck->second.size() && step_of(*it) < step_of(*stuck)))
        stuck = it;
    const int64_t stuck_step = step_of(*stuck);
    const auto& [what, occ] = stuck->first;
    std::vector<int> waiting, finished, never;
    std::vector<const RankRecord*> behind;
    double longest = 0;
    for (const RankRecord& r : recs) {
      const Wait* same = nullptr;
      uint64_t latest_occ = 0;
      for (const Wait& w : r.waits)
        if (w.what == what) {
          latest_occ = std::max(latest_occ, w.occurrence);
          if (w.occurrence == occ) same = &w;
        }
      if (same && same->waiting) {
        waiting.push_back(r.rank);
        longest = std::max(longest, same->seconds);
      } else if (same || latest_occ > occ) {
        finished.push_back(r.rank);
      } else {
        never.push_back(r.rank);
        behind.push_back(&r);
      }
    }
    out += "'" + what + "' #" + std::to_string(occ) + " (step " + std::to_string(stuck_step) + "): " +
           ranks_text(waiting) + " waiting in it (up to " + fmt_s(longest) + " s)";
    if (!finished.empty()) out += "; " + ranks_text(finished) + " finished it";
    out += never.empty() ? "; every rank with a record entered it\n" : "; not entered by " + ranks_text(never) + "\n";
    for (size_t i = 0; i < behind.size() && i < kListed; ++i) out += "  behind: " + doing(*behind[i]) + "\n";
    if (behind.size() > kListed) out += "  and " + std::to_string(behind.size() - kListed) + " more ranks behind\n";
  }
  if (!missing.empty())
    out += "no record from " + ranks_text(missing) + " (lost, killed before writing, or without a run directory)\n";
  return out;
}

std::vector<FailedHost> failed_hosts(const std::string& run_dir) {
  if (!fs::is_directory(run_dir)) throw UsageError("RUN_DIR " + run_dir + ": not a directory");
  std::vector<FailedHost> out;
  auto add = [&](const std::string& host, const std::string& cause) {
    for (FailedHost& f : out)
      if (f.host == host) return;
    out.push_back({host, cause});
  };
  // Lost peers, by host: which ranks, and which ranks found them lost.
  std::vector<std::pair<std::string, std::pair<std::set<int>, std::set<int>>>> lost;  // host -> (lost, finders)
  const std::vector<RankRecord> recs = read_records(fs::path(run_dir) / "flight");
  for (const RankRecord& r : recs)
    for (const auto& [rank, host] : r.lost) {
      auto it = std::find_if(lost.begin(), lost.end(), [&](const auto& e) { return e.first == host; });
      if (it == lost.end()) it = lost.insert(lost.end(), {host, {}});
      it->second.first.insert(rank);
      it->second.second.insert(r.rank);
    }
  for (const auto& [host, who] : lost)
    add(host, "lost: " + ranks_text({who.first.begin(), who.first.end()}) + " gave no answer to a probe (found by " +
                  ranks_text({who.second.begin(), who.second.end()}) + ")");
  // A stop by the slow-rank policy: the latest start's run_end says slow_rank; its latest slow_rank
  // warning names the host. The latest start's hosts, by rank. Only lines that can matter are parsed
  // (metrics.jsonl has a line a step).
  const fs::path metrics = fs::path(run_dir) / "metrics.jsonl";
  std::ifstream in(metrics);
  std::string line, status, slow_host, slow_rank;
  std::vector<std::string> hosts;
  int64_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    const bool start = line.find("\"run_start\"") != std::string::npos, end = line.find("\"run_end\"") != std::string::npos,
               slow = line.find("\"slow_rank\"") != std::string::npos;
    if (!start && !end && !slow) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const std::exception&) {
      continue;  // a line cut short by a killed writer: only the events above matter
    }
    const std::string event = j.value("event", "");
    if (event == "run_start") {
      status.clear(), slow_host.clear(), hosts.clear();
      if (j.contains("hosts") && j["hosts"].is_array())
        for (const auto& h : j["hosts"]) hosts.push_back(h.is_string() ? h.get<std::string>() : "?");
    }
    else if (event == "run_end") status = j.value("status", "");
    else if (event == "warning" && j.value("kind", "") == "slow_rank") {
      if (!j.contains("host") || !j["host"].is_string())
        throw UsageError(metrics.string() + " line " + std::to_string(n) + ": slow_rank warning without field 'host'");
      slow_host = j["host"].get<std::string>();
      slow_rank = j.contains("rank") ? j["rank"].dump() : "?";
    }
  }
  // Nobody found a peer lost, every record was written on a stop signal (the launcher ended the job)
  // and some ranks wrote none: those ended without a chance to (their node died, or they were killed
  // at once), as when mpirun ends the job on losing a node's daemon before any rank's probe names it.
  // Not when a rank wrote of its own error: the launcher then kills the rest, some at once.
  const bool all_stopped = std::all_of(recs.begin(), recs.end(),
                                       [](const RankRecord& r) { return r.reason.rfind("stop signal", 0) == 0; });
  if (lost.empty() && !recs.empty() && all_stopped && static_cast<int>(hosts.size()) == recs[0].world_size) {
    std::set<int> present;
    for (const RankRecord& r : recs) present.insert(r.rank);
    std::vector<std::pair<std::string, std::vector<int>>> silent;  // host -> ranks, in rank order
    for (int q = 0; q < recs[0].world_size; ++q) {
      if (present.count(q)) continue;
      const std::string& h = hosts[static_cast<size_t>(q)];
      auto it = std::find_if(silent.begin(), silent.end(), [&](const auto& e) { return e.first == h; });
      if (it == silent.end()) silent.push_back({h, {q}});
      else it->second.push_back(q);
    }
    for (const auto& [host, ranks] : silent)
      add(host, "no flight record from " + ranks_text(ranks) + " while " + std::to_string(recs.size()) +
                    " ranks wrote one (ended without a chance to: its node died, or it was killed at once)");
  }
  if (status == "slow_rank" && !slow_host.empty())
    add(slow_host, std::string("slow: rank ").append(slow_rank).append(
                       " judged slow until the run stopped (watchdog.slow_rank_stop_windows)"));
  return out;
}

}  // namespace ht
