#include "mpi/trace.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "mpi/check.hpp"
#include "mpi/collective_guard.hpp"
#include "base/error.hpp"

#if defined(HT_HAVE_CUDA) && __has_include(<nvtx3/nvToolsExt.h>)
#include <nvtx3/nvToolsExt.h>
#define HT_HAVE_NVTX 1
#endif

namespace ht {

namespace {
thread_local int t_thread_id = -1;
}  // namespace

int64_t Trace::steady_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t Trace::now_us() const { return steady_us() + offset_us_ - origin_us_; }

int64_t Trace::to_trace_us(std::chrono::steady_clock::time_point t) const {
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count() + offset_us_ - origin_us_;
}

int Trace::thread_id() {
  // Thread numbers are per process; a thread that records into two traces keeps one number.
  static std::atomic<int> next{0};
  if (t_thread_id < 0) t_thread_id = next++;
  return t_thread_id;
}

void Trace::enable_local() {
  comm_ = MPI_COMM_NULL;
  rank_ = 0;
  offset_us_ = 0;
  origin_us_ = steady_us();
  if (process_name_.empty()) process_name_ = "rank 0";
  enabled_ = true;
}

void Trace::enable(MPI_Comm comm) {
  comm_ = comm;
  int size = 1;
  HT_MPI_CHECK(MPI_Comm_rank(comm, &rank_));
  HT_MPI_CHECK(MPI_Comm_size(comm, &size));
  constexpr int kRounds = 16, kTag = 7301;
  offset_us_ = 0;
  // Ranks on rank 0's host share its clock (steady_clock is CLOCK_MONOTONIC, system-wide): offset 0.
  // The others estimate it: rank 0 answers each rank's pings with its own clock, and the rank keeps the
  // estimate from the round trip with the least delay: offset = t0 - (t_send + t_recv) / 2.
  char host[MPI_MAX_PROCESSOR_NAME] = {0}, host0[MPI_MAX_PROCESSOR_NAME] = {0};
  int hlen = 0;
  MPI_Get_processor_name(host, &hlen);
  std::copy(host, host + MPI_MAX_PROCESSOR_NAME, host0);
  HT_MPI_CHECK(MPI_Bcast(host0, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0, comm));
  int remote = std::string(host) != std::string(host0) ? 1 : 0;
  std::vector<int> remotes(static_cast<size_t>(size), 0);
  HT_MPI_CHECK(MPI_Allgather(&remote, 1, MPI_INT, remotes.data(), 1, MPI_INT, comm));
  for (int r = 1; r < size; ++r) {
    if (!remotes[static_cast<size_t>(r)]) continue;
    if (rank_ == 0) {
      for (int k = 0; k < kRounds; ++k) {
        int64_t dummy = 0;
        HT_MPI_CHECK(MPI_Recv(&dummy, 1, MPI_INT64_T, r, kTag, comm, MPI_STATUS_IGNORE));
        int64_t t0 = steady_us();
        HT_MPI_CHECK(MPI_Send(&t0, 1, MPI_INT64_T, r, kTag, comm));
      }
    } else if (rank_ == r) {
      int64_t best_rtt = std::numeric_limits<int64_t>::max();
      for (int k = 0; k < kRounds; ++k) {
        int64_t t1 = steady_us(), t0 = 0;
        HT_MPI_CHECK(MPI_Send(&t1, 1, MPI_INT64_T, 0, kTag, comm));
        HT_MPI_CHECK(MPI_Recv(&t0, 1, MPI_INT64_T, 0, kTag, comm, MPI_STATUS_IGNORE));
        int64_t t2 = steady_us();
        if (t2 - t1 < best_rtt) {
          best_rtt = t2 - t1;
          offset_us_ = t0 - (t1 + t2) / 2;
          rtt_us_ = best_rtt;
        }
      }
    }
  }
  int64_t origin = steady_us();  // rank 0's value is the origin of the shared axis
  HT_MPI_CHECK(MPI_Bcast(&origin, 1, MPI_INT64_T, 0, comm));
  origin_us_ = origin;
  if (process_name_.empty()) {
    char host[MPI_MAX_PROCESSOR_NAME] = {0};
    int len = 0;
    MPI_Get_processor_name(host, &len);
    process_name_ = "rank " + std::to_string(rank_) + " (" + std::string(host, static_cast<size_t>(len)) + ")";
  }
  enabled_ = true;
}

void Trace::record(std::string name, const char* category, int64_t begin_us, int64_t end_us, int64_t index) {
  if (!enabled_) return;
  int tid = thread_id();
  std::lock_guard<std::mutex> lk(mu_);
  events_.push_back(Event{std::move(name), category, begin_us, end_us - begin_us, tid, index});
}

void Trace::set_thread_name(const std::string& name) {
  int tid = thread_id();
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& [id, n] : thread_names_)
    if (id == tid) {
      n = name;
      return;
    }
  thread_names_.emplace_back(tid, name);
}

std::vector<Trace::Event> Trace::events() const {
  std::lock_guard<std::mutex> lk(mu_);
  return events_;
}

std::string Trace::events_json(int pid) const {
  using nlohmann::json;
  std::lock_guard<std::mutex> lk(mu_);
  std::string out;
  auto add = [&](const json& j) {
    if (!out.empty()) out += ",\n";
    out += j.dump();
  };
  add(json{{"ph", "M"}, {"pid", pid}, {"tid", 0}, {"name", "process_name"}, {"args", {{"name", process_name_}}}});
  add(json{{"ph", "M"}, {"pid", pid}, {"tid", 0}, {"name", "process_sort_index"}, {"args", {{"sort_index", pid}}}});
  for (const auto& [tid, n] : thread_names_)
    add(json{{"ph", "M"}, {"pid", pid}, {"tid", tid}, {"name", "thread_name"}, {"args", {{"name", n}}}});
  for (const auto& e : events_) {
    json j{{"ph", "X"}, {"name", e.name}, {"cat", e.category}, {"ts", e.begin_us}, {"dur", e.dur_us},
           {"pid", pid}, {"tid", e.tid}};
    if (e.index >= 0) j["args"] = {{"index", e.index}};
    add(j);
  }
  return out;
}

size_t Trace::write(const std::string& dir, const std::string& filename) {
  if (!enabled_) return 0;
  std::string mine = events_json(rank_);
  size_t count = events().size();
  std::vector<std::string> parts;
  if (comm_ == MPI_COMM_NULL) {
    parts.push_back(mine);
  } else {
    int size = 1;
    HT_MPI_CHECK(MPI_Comm_size(comm_, &size));
    if (mine.size() > static_cast<size_t>(std::numeric_limits<int>::max()))
      throw RuntimeError("trace: rank " + std::to_string(rank_) + " has more than 2 GB of trace events");
    int len = static_cast<int>(mine.size());
    std::vector<int> lens(static_cast<size_t>(size)), displs(static_cast<size_t>(size));
    CollectiveWait wait("trace write (MPI_Gather of every rank's events to rank 0)");
    HT_MPI_CHECK(MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, comm_));
    long long total = 0;
    for (int r = 0; r < size; ++r) {
      displs[r] = static_cast<int>(total);
      total += lens[r];
    }
    if (rank_ == 0 && total > std::numeric_limits<int>::max())
      throw RuntimeError("trace: more than 2 GB of trace events in total; trace fewer steps");
    std::vector<char> all(rank_ == 0 ? static_cast<size_t>(total) : 0);
    HT_MPI_CHECK(MPI_Gatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, 0, comm_));
    if (rank_ != 0) return count;
    for (int r = 0; r < size; ++r) parts.emplace_back(all.data() + displs[r], static_cast<size_t>(lens[r]));
    count = 0;
  }
  namespace fs = std::filesystem;
  fs::path path = fs::path(dir) / filename, tmp = path;
  tmp += ".tmp";
  std::error_code ec;
  fs::create_directories(dir, ec);
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw RuntimeError("trace: cannot write " + tmp.string());
    f << "{\"displayTimeUnit\": \"ms\",\n\"otherData\": {\"producer\": \"hpctrain\", \"clock\": "
         "\"steady_clock, microseconds, aligned to rank 0\"},\n\"traceEvents\": [\n";
    bool first = true;
    for (const auto& p : parts) {
      if (p.empty()) continue;
      if (!first) f << ",\n";
      f << p;
      first = false;
      count += static_cast<size_t>(std::count(p.begin(), p.end(), '\n') + 1);
    }
    f << "\n]}\n";
    if (!f) throw RuntimeError("trace: write failed for " + tmp.string());
  }
  fs::rename(tmp, path, ec);
  if (ec) throw RuntimeError("trace: cannot rename " + tmp.string() + " to " + path.string() + ": " + ec.message());
  return count;
}

void TraceSpan::begin() {
#if defined(HT_HAVE_NVTX)
  nvtxRangePushA(name_);
#endif
  begin_us_ = t_->now_us();
}

void TraceSpan::end() {
  int64_t end_us = t_->now_us();
#if defined(HT_HAVE_NVTX)
  nvtxRangePop();
#endif
  t_->record(name_, category_, begin_us_, end_us, index_);
}

}  // namespace ht
