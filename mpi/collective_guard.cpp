#include "mpi/collective_guard.hpp"

#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <exception>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "mpi/peer_beacon.hpp"
#include "mpi/flight_recorder.hpp"
#include "mpi/whereabouts.hpp"
#include "base/check.hpp"
#include "base/log.hpp"

namespace ht {
namespace {

constexpr int kSlots = 16;
constexpr int kTagProbe = 7101, kTagReply = 7102;
constexpr double kPollS = 0.1;

double now_s() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe; steady_clock on Linux
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct Slot {
  bool used = false;
  unsigned gen = 0;
  const char* what = "";
  WaitKind kind = WaitKind::bounded;
  int exit_code = 1;
  double start = 0;
  double next_probe = 0;  // while_peers_answer
};

std::mutex g_mu;  // slots, hosts
Slot g_slots[kSlots];
std::vector<std::string> g_hosts;
int g_rank = -1;
std::atomic<bool> g_running{false};
std::atomic<double> g_limit{300.0};
std::atomic<long long> g_signal_ns{0};  // monotonic time of the first stop signal, 0 = none
std::atomic<int> g_signo{0};
static_assert(std::atomic<long long>::is_always_lock_free && std::atomic<int>::is_always_lock_free);

// Probes.
MPI_Comm g_probe_comm = MPI_COMM_NULL;  // written once before g_probe_ready is set
std::atomic<bool> g_probe_ready{false};
std::mutex g_probe_mu;  // held by a probe; detach takes it, so no probe runs into MPI_Finalize
thread_local int t_relaxed = 0;  // while_peers_answer scopes open on this thread
thread_local int t_open = 0;     // CollectiveWait scopes open on this thread (collective_wait_open)
std::atomic<bool> g_responder_stop{false};
std::thread g_responder;

std::string fmt_s(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", s);
  return b;
}

/// True when the peers can be probed: the UDP beacon (mpi/peer_beacon.hpp), else the MPI probe.
bool can_probe_peers() { return peer_beacon_ready() || g_probe_ready.load(); }

/// The peers that did not answer within window_s. The beacon where it works: an MPI probe of a dead
/// peer was seen to block in Open MPI's error path (waiting on its runtime thread) until the
/// launcher's SIGKILL.
/// A stop signal arriving meanwhile cuts the probe to kSignalProbeS (the launcher's SIGKILL follows a
/// second after its SIGTERM: name the peers before it). `used_s` gets the window actually waited.
/// `where` (when given) gets what each peer that answered the beacon said of its whereabouts.
std::vector<int> unanswered_peers(double window_s, double* used_s = nullptr, std::map<int, std::string>* where = nullptr) {
  const long long sig0 = g_signal_ns.load();
  const double t0 = now_s();
  auto cut = [&] { return g_signal_ns.load() != sig0 && now_s() - t0 >= kSignalProbeS; };
  std::vector<int> lost =
      peer_beacon_ready() ? peer_beacon_unanswered(window_s, cut, where) : probe_unanswered_peers(window_s, cut);
  if (used_s) *used_s = std::min(window_s, now_s() - t0);
  return lost;
}

void responder_loop() {
  static const int kOne = 1;
  int in = 0;
  MPI_Request rq = MPI_REQUEST_NULL;
  if (MPI_Irecv(&in, 1, MPI_INT, MPI_ANY_SOURCE, kTagProbe, g_probe_comm, &rq) != MPI_SUCCESS) return;
  while (!g_responder_stop.load()) {
    int flag = 0;
    MPI_Status st;
    if (MPI_Test(&rq, &flag, &st) != MPI_SUCCESS) return;
    if (!flag) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    MPI_Request s = MPI_REQUEST_NULL;
    // The answer goes out in the background: a prober that vanished must not block this thread.
    if (MPI_Isend(&kOne, 1, MPI_INT, st.MPI_SOURCE, kTagReply, g_probe_comm, &s) == MPI_SUCCESS)
      MPI_Request_free(&s);
    if (MPI_Irecv(&in, 1, MPI_INT, MPI_ANY_SOURCE, kTagProbe, g_probe_comm, &rq) != MPI_SUCCESS) return;
  }
  MPI_Cancel(&rq);
  MPI_Request_free(&rq);
}

/// Where each rank is, this one first, then the peers that answered (`where`, by rank): the ranks that
/// are in no collective first (the ones "elsewhere"), at most kWhereaboutsListed in all.
std::string whereabouts_list(const std::map<int, std::string>& where) {
  constexpr size_t kWhereaboutsListed = 8;
  std::vector<std::pair<int, const std::string*>> ranks;
  for (const auto& [r, text] : where) ranks.emplace_back(r, &text);
  std::stable_partition(ranks.begin(), ranks.end(),
                        [](const auto& e) { return e.second->find("; in no collective") != std::string::npos; });
  std::string out = describe_ranks({g_rank}) + " (this rank): " + whereabouts_text();
  for (size_t i = 0; i < ranks.size() && i + 1 < kWhereaboutsListed; ++i)
    out += "; " + describe_ranks({ranks[i].first}) + ": " + *ranks[i].second;
  if (ranks.size() + 1 > kWhereaboutsListed)
    out += "; and " + std::to_string(ranks.size() + 1 - kWhereaboutsListed) + " more ranks";
  return out;
}

/// What a probe found, for a message: the lost peers with their hosts, or that every peer answered
/// (with where each rank is, when the peers said), or (not probed) every peer.
std::string probe_result_text(const std::vector<int>& unanswered, bool probed, double window_s,
                              const std::map<int, std::string>& where = {}) {
  if (!probed) {
    std::vector<int> all;
    {
      std::lock_guard lk(g_mu);
      for (int r = 0; r < static_cast<int>(g_hosts.size()); ++r)
        if (r != g_rank) all.push_back(r);
    }
    return "could not probe the peers; the peers were: " + describe_ranks(all);
  }
  if (unanswered.empty())
    return "every peer answered a probe: no rank is lost, one is slow or waits elsewhere (raise dist.timeout_s "
           "if the step is that slow)" +
           (where.empty() ? std::string() : "; where each rank is [" + whereabouts_list(where) + "]");
  return "lost peers (no answer to a probe within " + fmt_s(window_s) + " s): " + describe_ranks(unanswered);
}

/// "; flight record: PATH (lined up with the other ranks' by: hpctrain inspect --flight RUN_DIR)", or
/// "" when none was written.
std::string flight_note(const std::string& path) {
  return path.empty() ? std::string() : "; flight record: " + path + " (every rank's lined up by: " + flight_inspect_hint() + ")";
}

/// `ranks` with their hosts, for the flight record's `lost` list.
std::vector<LostPeer> lost_peers(const std::vector<int>& ranks) {
  std::lock_guard lk(g_mu);
  std::vector<LostPeer> out;
  for (int r : ranks)
    out.push_back({r, r >= 0 && r < static_cast<int>(g_hosts.size()) ? g_hosts[static_cast<size_t>(r)] : "?"});
  return out;
}

/// The watchdog gives up `s`: names the lost peers and ends the process. Watchdog thread only.
[[noreturn]] void give_up(const Slot& s, double now, bool by_signal, const std::vector<int>& unanswered, bool probed,
                          double window_s, const std::map<int, std::string>& where) {
  std::string msg = "hpctrain: fatal (" + rank_host_tag() + "): " + s.what;
  if (by_signal)
    msg += " still waiting " + fmt_s(now - s.start) + " s after a stop signal (" + std::to_string(g_signo.load()) +
           ") arrived (" + fmt_s(kStopGraceS) + " s allowed); no checkpoint saved at this step";
  else if (s.kind == WaitKind::bounded)
    msg += " did not complete within dist.timeout_s = " + fmt_s(g_limit.load()) + " s";
  else
    msg += " waited " + fmt_s(now - s.start) + " s for peers and a probe went unanswered";
  msg += "; " + probe_result_text(unanswered, probed, window_s, where);
  msg += flight_note(flight_recorder_dump("collective time-out: " + std::string(s.what),
                                          probed ? lost_peers(unanswered) : std::vector<LostPeer>{}));
  msg += "; exiting with code " + std::to_string(s.exit_code) + " without MPI_Finalize (docs/exit_codes.md)";
  if (probed && !unanswered.empty()) {
    // The peers that answered may not be waiting (one in a long save, say) or may reach their limits
    // later than the launcher kills them: tell them now, so each names the lost peers before it ends.
    std::vector<int> answered;
    for (int r = 0; r < static_cast<int>(g_hosts.size()); ++r)
      if (r != g_rank && std::find(unanswered.begin(), unanswered.end(), r) == unanswered.end()) answered.push_back(r);
    peer_beacon_notify_gave_up(answered, unanswered);
  }
  log_raw_err(msg);
  // The ranks waiting in the same collective reach their limits within moments of this one; once this
  // rank is gone the launcher kills them (SIGTERM, SIGKILL a second later), so let them print first.
  std::this_thread::sleep_for(std::chrono::duration<double>(kExitLingerS));
  exit_without_mpi(s.exit_code);
}

/// A peer told this rank that it ends the run (peer_beacon_notify_gave_up): name what it lost and end
/// too, whether or not this rank waits on peers now. Watchdog thread only.
[[noreturn]] void give_up_on_notice(const PeerNotice& n, double now) {
  std::string where = "not waiting on peers";
  int code = 1;
  {
    std::lock_guard lk(g_mu);
    for (const Slot& s : g_slots)
      if (s.used) {
        where = std::string("in ") + s.what + " for " + fmt_s(now - s.start) + " s";
        code = s.exit_code;
        break;
      }
  }
  std::string lost = describe_ranks(n.lost);
  if (n.lost_count > static_cast<int>(n.lost.size()))
    lost += " and " + std::to_string(n.lost_count - static_cast<int>(n.lost.size())) + " more";
  const std::string flight =
      flight_note(flight_recorder_dump(describe_ranks({n.from}) + " ends the run: lost peers " + lost, lost_peers(n.lost)));
  log_raw_err("hpctrain: fatal (" + rank_host_tag() + "): " + describe_ranks({n.from}) + " ends the run: lost peers " +
              lost + " (no answer to its probe); this rank was " + where + flight + "; exiting with code " +
              std::to_string(code) + " without MPI_Finalize (docs/exit_codes.md)");
  std::this_thread::sleep_for(std::chrono::duration<double>(kExitLingerS));
  exit_without_mpi(code);
}

void watchdog_loop() {
  bool signal_noted = false, flight_dumped = false;
  for (;;) {
    std::this_thread::sleep_for(std::chrono::duration<double>(kPollS));
    const double now = now_s();
    if (const auto notice = peer_beacon_notice()) give_up_on_notice(*notice, now);
    const long long sig_ns = g_signal_ns.load();
    const double sig_t = sig_ns ? static_cast<double>(sig_ns) * 1e-9 : 0;
    const double limit = g_limit.load();
    Slot expired, probe_for;
    bool by_signal = false, do_probe = false, in_bounded = false;
    int probe_slot = -1;
    {
      std::lock_guard lk(g_mu);
      for (const Slot& s : g_slots) in_bounded |= s.used && s.kind == WaitKind::bounded;
      for (int i = 0; i < kSlots && !expired.used && !do_probe; ++i) {
        Slot& s = g_slots[i];
        if (!s.used) continue;
        if (s.kind == WaitKind::bounded) {
          const double by_limit = s.start + limit;
          const double by_sig = sig_ns ? std::max(s.start, sig_t) + kStopGraceS : INFINITY;
          if (now >= std::min(by_limit, by_sig)) {
            expired = s;
            by_signal = by_sig < by_limit;
          }
        } else if (now >= s.next_probe) {
          probe_for = s;
          probe_slot = i;
          do_probe = true;
        }
      }
    }
    if (sig_ns && !flight_dumped) {
      // A stop signal: the launcher may kill this rank a second later (after a peer failed), so the
      // record is written now, from this thread, whatever the compute thread is doing.
      flight_dumped = true;
      flight_recorder_dump("stop signal " + std::to_string(g_signo.load()));
    }
    if (sig_ns && in_bounded && !signal_noted && can_probe_peers()) {
      // A launcher ending the job (a lost node) sends SIGTERM and SIGKILL a second later: say at once
      // which peers this rank was waiting for, while there is time.
      signal_noted = true;
      const std::vector<int> lost = unanswered_peers(kSignalProbeS);
      if (!lost.empty())
        log_raw_err("hpctrain: rank " + std::to_string(g_rank) + ": stop signal " + std::to_string(g_signo.load()) +
                    " while waiting on peers; no answer to a probe within " + fmt_s(kSignalProbeS) +
                    " s from: " + describe_ranks(lost));
    }
    if (expired.used) {
      bool can_probe = can_probe_peers();
      double window = 0;
      std::map<int, std::string> where;
      const std::vector<int> lost = can_probe ? unanswered_peers(kProbeWindowS, &window, &where) : std::vector<int>{};
      can_probe = can_probe && can_probe_peers();  // not detached meanwhile (MPI_Finalize)
      give_up(expired, now, by_signal, lost, can_probe, window, where);
    }
    if (do_probe) {
      const bool can_probe = can_probe_peers();
      double window = 0;
      const std::vector<int> lost = can_probe ? unanswered_peers(kProbeWindowS, &window) : std::vector<int>{};
      std::unique_lock lk(g_mu);
      Slot& s = g_slots[probe_slot];
      if (!s.used || s.gen != probe_for.gen) continue;  // the wait ended meanwhile
      if (lost.empty()) {
        // Everyone answered: the wait goes on (a slow save is not a failed peer); after a stop signal
        // the peers are checked more often.
        s.next_probe = now_s() + (sig_ns ? std::min(limit, kStopGraceS) : limit);
        continue;
      }
      Slot copy = s;
      lk.unlock();
      give_up(copy, now_s(), false, lost, true, window, {});
    }
  }
}

}  // namespace

void collective_guard_start(double limit_s) {
  if (g_running.exchange(true)) return;
  if (limit_s > 0) g_limit = limit_s;
  // A peer that died leaves its TCP connections closed: Open MPI's next write to one (a probe, a
  // collective) must fail with EPIPE, not end this rank by SIGPIPE before it can name the lost peers.
  ::signal(SIGPIPE, SIG_IGN);
  std::thread(watchdog_loop).detach();
}

bool collective_guard_running() { return g_running.load(); }

void set_collective_time_limit(double limit_s) { g_limit = limit_s > 0 ? limit_s : INFINITY; }

double collective_time_limit() { return g_limit.load(); }

void collective_guard_attach(MPI_Comm world, int rank, const std::vector<std::string>& hosts) {
  {
    std::lock_guard lk(g_mu);
    g_rank = rank;
    g_hosts = hosts;
  }
  if (!g_running.load() || g_probe_ready.load()) return;
  MPI_Comm c = MPI_COMM_NULL;
  {
    CollectiveWait w("MPI_Comm_dup (start-up)");
    if (MPI_Comm_dup(world, &c) != MPI_SUCCESS) return;
  }
  MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
  {
    CollectiveWait w("peer probe set-up (start-up)");
    peer_beacon_attach(world, rank, hosts);
  }
  g_probe_comm = c;
  g_probe_ready = true;
  g_responder_stop = false;
  g_responder = std::thread(responder_loop);
}

void collective_guard_detach() {
  {
    std::lock_guard lk(g_probe_mu);
    g_probe_ready = false;
  }
  if (!g_responder.joinable()) return;
  g_responder_stop = true;
  g_responder.join();
}

void note_stop_signal(int signo) noexcept {
  long long expected = 0;
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  const long long ns = static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
  if (g_signal_ns.compare_exchange_strong(expected, ns)) g_signo.store(signo);
}

CollectiveWait::CollectiveWait(const char* what, WaitKind kind, int exit_code)
    : unwinding_(std::uncaught_exceptions()) {
  note_collective_begin(what);  // where this rank is, for the peers that probe it (mpi/whereabouts.hpp)
  if (!g_running.load()) return;
  ++t_open;
  counted_ = true;
  // Inside a while_peers_answer scope of this thread, the outer scope covers every inner wait.
  if (t_relaxed > 0) return;
  if (kind == WaitKind::while_peers_answer) {
    ++t_relaxed;
    relaxed_ = true;
  }
  std::lock_guard lk(g_mu);
  for (int i = 0; i < kSlots; ++i) {
    Slot& s = g_slots[i];
    if (s.used) continue;
    const double t = now_s();
    s.used = true;
    ++s.gen;
    s.what = what;
    s.kind = kind;
    s.exit_code = exit_code;
    s.start = t;
    s.next_probe = t + g_limit.load();
    slot_ = i;
    return;
  }
  // More than kSlots threads in MPI at once does not happen in hpctrain (at most main, the
  // communication thread and the checkpoint writer); such a wait is simply not guarded.
}

CollectiveWait::~CollectiveWait() {
  note_collective_end(std::uncaught_exceptions() <= unwinding_);  // an error leaving the scope: "failed"
  if (counted_) --t_open;
  if (relaxed_) --t_relaxed;
  if (slot_ < 0) return;
  std::lock_guard lk(g_mu);
  g_slots[slot_].used = false;
}

std::string probe_peers_text(double window_s) {
  const bool can_probe = can_probe_peers();
  double window = 0;
  std::map<int, std::string> where;
  const std::vector<int> lost = can_probe ? unanswered_peers(window_s, &window, &where) : std::vector<int>{};
  return probe_result_text(lost, can_probe, window, where);
}

bool collective_wait_open() { return !g_running.load() || t_open > 0; }

std::vector<int> probe_unanswered_peers(double window_s, const std::function<bool()>& cut_short) {
  std::vector<int> lost;
  std::lock_guard probe_lk(g_probe_mu);
  if (!g_probe_ready.load()) return lost;
  int n = 0, me = 0;
  MPI_Comm_size(g_probe_comm, &n);
  MPI_Comm_rank(g_probe_comm, &me);
  static const int kProbe = 1;
  // Heap buffers, never freed on the failure path: a peer may still answer after we gave up.
  auto* replies = new int[static_cast<size_t>(n)]();
  std::vector<MPI_Request> rr(static_cast<size_t>(n), MPI_REQUEST_NULL);
  std::vector<char> got(static_cast<size_t>(n), 0);
  for (int p = 0; p < n; ++p) {
    if (p == me) {
      got[static_cast<size_t>(p)] = 1;
      continue;
    }
    if (MPI_Irecv(&replies[p], 1, MPI_INT, p, kTagReply, g_probe_comm, &rr[static_cast<size_t>(p)]) != MPI_SUCCESS)
      continue;
    MPI_Request s = MPI_REQUEST_NULL;
    if (MPI_Isend(&kProbe, 1, MPI_INT, p, kTagProbe, g_probe_comm, &s) == MPI_SUCCESS) MPI_Request_free(&s);
  }
  const double end = now_s() + window_s;
  for (;;) {
    bool all = true;
    for (int p = 0; p < n; ++p) {
      if (got[static_cast<size_t>(p)]) continue;
      int flag = 0;
      if (rr[static_cast<size_t>(p)] != MPI_REQUEST_NULL &&
          MPI_Test(&rr[static_cast<size_t>(p)], &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && flag)
        got[static_cast<size_t>(p)] = 1;
      else
        all = false;
    }
    if (all || now_s() >= end || (cut_short && cut_short())) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (int p = 0; p < n; ++p)
    if (!got[static_cast<size_t>(p)]) lost.push_back(p);
  if (lost.empty()) delete[] replies;  // every receive completed
  return lost;
}

std::string describe_ranks(const std::vector<int>& ranks) {
  std::vector<std::string> hosts;
  {
    std::lock_guard lk(g_mu);
    hosts = g_hosts;
  }
  std::vector<std::pair<std::string, std::vector<int>>> by_host;  // in order of first rank
  for (int r : ranks) {
    const std::string h = r >= 0 && r < static_cast<int>(hosts.size()) ? hosts[static_cast<size_t>(r)] : "?";
    auto it = std::find_if(by_host.begin(), by_host.end(), [&](const auto& e) { return e.first == h; });
    if (it == by_host.end()) by_host.push_back({h, {r}});
    else it->second.push_back(r);
  }
  std::string out;
  for (const auto& [h, rs] : by_host) {
    if (!out.empty()) out += ", ";
    out += h + (rs.size() == 1 ? " (rank " : " (ranks ");
    for (size_t i = 0; i < rs.size(); ++i) out += (i ? ", " : "") + std::to_string(rs[i]);
    out += ")";
  }
  return out.empty() ? "none" : out;
}

void exit_without_mpi(int code) {
  // stdio may be locked by a thread stuck elsewhere: flush from a helper thread and give it
  // kExitFlushS, then end without running destructors or atexit handlers (MPI's would block).
  static std::atomic<bool> flushed{false};
  std::thread([] {
    std::fflush(stdout);
    std::fflush(stderr);
    flushed = true;
  }).detach();
  const double end = now_s() + kExitFlushS;
  while (!flushed.load() && now_s() < end) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ::_exit(code);
}

}  // namespace ht
