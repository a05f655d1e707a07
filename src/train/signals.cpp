#include "src/train/signals.hpp"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstring>
#include <map>
#include <pthread.h>
#include <unistd.h>

#include "mpi/dist.hpp"
#include "base/error.hpp"

namespace ht {
namespace {

std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal flag must be lock-free");

struct Saved {
  int signo;
  struct sigaction old;
};
std::vector<Saved> g_saved;
std::atomic<bool> g_receiver{false};  // isolate_signals_to_receiver_thread() started the receiver

extern "C" void ht_stop_handler(int signo) {
  int expected = 0;
  g_signal.compare_exchange_strong(expected, signo);  // keep the first; lock-free atomics are signal-safe
  note_stop_signal(signo);  // a rank stuck in MPI ends kStopGraceS later (mpi/collective_guard.hpp)
}

const std::map<std::string, int>& signal_names() {
  static const std::map<std::string, int> m = {{"TERM", SIGTERM}, {"USR1", SIGUSR1}, {"USR2", SIGUSR2},
                                               {"INT", SIGINT},   {"HUP", SIGHUP},   {"QUIT", SIGQUIT},
                                               {"XCPU", SIGXCPU}, {"ALRM", SIGALRM}, {"CONT", SIGCONT}};
  return m;
}

}  // namespace

void isolate_signals_to_receiver_thread() {
  static std::atomic<bool> done{false};
  if (done.exchange(true)) return;
  sigset_t set;
  sigemptyset(&set);
  for (const auto& [name, signo] : signal_names()) sigaddset(&set, signo);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, 256 * 1024);  // the handler only stores an int
  const int rc = pthread_create(
      &t, &attr,
      [](void*) -> void* {
        sigset_t none;
        sigemptyset(&none);
        pthread_sigmask(SIG_SETMASK, &none, nullptr);
        for (;;) pause();  // returns after each handled signal
        return nullptr;
      },
      nullptr);
  pthread_attr_destroy(&attr);
  // Without the receiver (thread creation failed), unblock again so signals still arrive somewhere.
  if (rc != 0) pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  else g_receiver.store(true);
}

std::vector<int> parse_signal_list(const std::string& list) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t comma = list.find(',', pos);
    std::string item = list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? list.size() + 1 : comma + 1;
    item.erase(std::remove_if(item.begin(), item.end(), ::isspace), item.end());
    if (item.empty()) continue;
    std::string up = item;
    for (auto& c : up) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (up.rfind("SIG", 0) == 0) up = up.substr(3);
    int signo = 0;
    if (std::all_of(up.begin(), up.end(), ::isdigit)) {
      signo = std::stoi(up);
    } else if (auto it = signal_names().find(up); it != signal_names().end()) {
      signo = it->second;
    }
    if (signo <= 0 || signo >= NSIG || signo == SIGKILL || signo == SIGSTOP)
      throw UsageError("checkpoint.signals = " + list + ": '" + item +
                       "' is not a signal that can be caught (use names like TERM, USR1, USR2, INT, HUP, XCPU)");
    if (std::find(out.begin(), out.end(), signo) == out.end()) out.push_back(signo);
  }
  return out;
}

void install_stop_signals(const std::string& list) {
  auto sigs = parse_signal_list(list);
  // Signals in the old and the new set keep the handler throughout (no moment of the default
  // action while the set is replaced: hpctrain train installs the default set before MPI_Init and
  // the configured one once the config is read); the others get back what they had before.
  std::vector<Saved> kept;
  for (auto it = g_saved.rbegin(); it != g_saved.rend(); ++it) {
    if (it->signo != SIGXFSZ && std::find(sigs.begin(), sigs.end(), it->signo) != sigs.end())
      kept.push_back(*it);
    else
      sigaction(it->signo, &it->old, nullptr);
  }
  g_saved.assign(kept.rbegin(), kept.rend());
  sigset_t block;
  sigemptyset(&block);
  for (int s : sigs) {
    sigaddset(&block, s);
    if (std::any_of(g_saved.begin(), g_saved.end(), [s](const Saved& v) { return v.signo == s; })) continue;
    struct sigaction sa {};
    sa.sa_handler = ht_stop_handler;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    Saved sv{s, {}};
    if (sigaction(s, &sa, &sv.old) != 0)
      throw RuntimeError("sigaction(" + std::to_string(s) + "): " + std::strerror(errno));
    g_saved.push_back(sv);
  }
  // A numbered signal outside the isolated names is kept off this (computing) thread too, but only
  // when the receiver thread exists to take it (else it would stay pending).
  if (g_receiver.load()) pthread_sigmask(SIG_BLOCK, &block, nullptr);
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  sigemptyset(&ign.sa_mask);
  Saved sv{SIGXFSZ, {}};
  if (sigaction(SIGXFSZ, &ign, &sv.old) == 0) g_saved.push_back(sv);
}

void restore_stop_signals() {
  for (auto it = g_saved.rbegin(); it != g_saved.rend(); ++it) sigaction(it->signo, &it->old, nullptr);
  g_saved.clear();
}

void retire_stop_signals() {
  std::vector<Saved> kept;
  for (auto it = g_saved.rbegin(); it != g_saved.rend(); ++it) {
    if (it->signo == SIGTERM || it->signo == SIGINT || it->signo == SIGXFSZ)
      sigaction(it->signo, &it->old, nullptr);
    else
      kept.push_back(*it);
  }
  g_saved.assign(kept.rbegin(), kept.rend());  // restore_stop_signals() can still undo the rest
}

bool stop_requested() { return g_signal.load(std::memory_order_relaxed) != 0; }
int stop_signal() { return g_signal.load(std::memory_order_relaxed); }
void clear_stop_request() { g_signal.store(0); }

uint32_t agree_step_flags(uint32_t local) {
  return dist_bitwise_or(local, "agree_step_flags (MPI_Allreduce at a step boundary)");
}

}  // namespace ht
