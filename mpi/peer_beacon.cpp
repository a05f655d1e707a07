#include "mpi/peer_beacon.hpp"

#include "mpi/whereabouts.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstddef>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <cstring>
#include <random>
#include <thread>

#include "base/log.hpp"

namespace ht {
namespace {

constexpr int kMaxAddrs = 8;           // IPv4 addresses published per rank
constexpr uint32_t kMagic = 0x48544250;  // "HTBP"
constexpr uint32_t kPing = 1, kPong = 2, kGaveUp = 3;
constexpr int kNoticeRanks = 256;      // lost ranks a notice lists (it counts them all)
constexpr double kResendS = 0.15;      // a datagram lost on the way is sent again
constexpr double kAttachCheckS = 2.0;  // start-up check: the next rank must answer within this
constexpr double kPollS = 0.05;        // how often a probe asks whether to end early

struct Contact {
  uint64_t id = 0;  // random per process: an answer from anyone else does not count
  uint32_t addr[kMaxAddrs] = {};  // network byte order
  uint16_t port = 0;  // network byte order
  uint16_t naddr = 0;
  uint32_t pad = 0;
};
static_assert(sizeof(Contact) == 48);

struct Msg {
  uint32_t magic;
  uint32_t kind;
  uint64_t id;    // ping: the id of the rank asked; pong: the id of the rank answering
  int32_t rank;   // ping: the rank asked; pong: the rank answering
  uint32_t seq;
};

// kPong: a Msg followed by the answering rank's whereabouts (mpi/whereabouts.hpp), not 0-terminated.
struct Pong {
  Msg head;
  char text[kWhereaboutsMax];
};

// kGaveUp: the sender ends the run having lost `lost` (first nlisted of nlost ranks).
struct Notice {
  uint32_t magic;
  uint32_t kind;
  uint64_t id;    // the id of the rank told
  int32_t rank;   // the sender
  uint32_t nlost;
  uint32_t nlisted;
  int32_t lost[kNoticeRanks];
};
constexpr size_t kNoticeHeader = offsetof(Notice, lost);

int g_fd = -1;
int g_rank = -1;
std::vector<Contact> g_contacts;   // written before g_ready is set, read-only after
std::vector<std::string> g_hosts;  // idem
std::atomic<bool> g_ready{false};
std::atomic<uint32_t> g_seq{1};
std::mutex g_notice_mu;
std::optional<PeerNotice> g_notice;  // the first notice received (under g_notice_mu)

double now_s() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Keeps the first valid notice: addressed to this process (its id), from a rank of the job, sizes in range.
void take_notice(const Notice& m, ssize_t n, uint64_t id) {
  const int world = static_cast<int>(g_contacts.size());
  if (m.id != id || m.rank < 0 || m.rank >= world || m.nlisted > kNoticeRanks || m.nlisted > m.nlost ||
      n != static_cast<ssize_t>(kNoticeHeader + m.nlisted * sizeof(int32_t)))
    return;
  PeerNotice out;
  out.from = m.rank;
  out.lost_count = static_cast<int>(std::min<uint32_t>(m.nlost, static_cast<uint32_t>(world)));
  for (uint32_t i = 0; i < m.nlisted; ++i)
    if (m.lost[i] >= 0 && m.lost[i] < world) out.lost.push_back(m.lost[i]);
  std::lock_guard lk(g_notice_mu);
  if (!g_notice) g_notice = std::move(out);
}

// The answering thread: a ping carrying this process's id gets a pong back to its sender; a notice
// carrying it is kept (peer_beacon_notice).
void answer_loop(int fd, uint64_t id, int rank) {
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 1000) <= 0) continue;
    Notice m{};
    sockaddr_in from{};
    socklen_t len = sizeof from;
    const ssize_t n = ::recvfrom(fd, &m, sizeof m, 0, reinterpret_cast<sockaddr*>(&from), &len);
    if (n < static_cast<ssize_t>(sizeof(Msg)) || m.magic != kMagic) continue;
    if (m.kind == kGaveUp) {
      take_notice(m, n, id);
      continue;
    }
    Msg q{};
    std::memcpy(&q, &m, sizeof q);
    if (n != static_cast<ssize_t>(sizeof q) || q.kind != kPing || q.id != id || q.rank != rank) continue;
    Pong r{};
    r.head = Msg{kMagic, kPong, id, rank, q.seq};
    const std::string where = whereabouts_text();  // where this rank is, for a prober's time-out message
    const size_t k = std::min(where.size(), sizeof r.text);
    std::memcpy(r.text, where.data(), k);
    ::sendto(fd, &r, sizeof r.head + k, MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&from), len);
  }
}

// Sends `len` bytes to every address of rank r (and 127.0.0.1 first when r shares this host).
void send_to_rank(int fd, int r, const void* buf, size_t len) {
  const Contact& c = g_contacts[static_cast<size_t>(r)];
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = c.port;
  std::vector<uint32_t> addrs(c.addr, c.addr + c.naddr);
  if (g_hosts[static_cast<size_t>(r)] == g_hosts[static_cast<size_t>(g_rank)]) addrs.insert(addrs.begin(), htonl(INADDR_LOOPBACK));
  for (uint32_t a : addrs) {
    to.sin_addr.s_addr = a;
    ::sendto(fd, buf, len, MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&to), sizeof to);
  }
}

Contact local_contact(int fd, uint64_t id) {
  Contact c;
  c.id = id;
  sockaddr_in me{};
  socklen_t len = sizeof me;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&me), &len) == 0) c.port = me.sin_port;
  ifaddrs* ifs = nullptr;
  if (::getifaddrs(&ifs) == 0) {
    for (ifaddrs* i = ifs; i && c.naddr < kMaxAddrs; i = i->ifa_next) {
      if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
      if (!(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK)) continue;
      c.addr[c.naddr++] = reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr;
    }
    ::freeifaddrs(ifs);
  }
  return c;
}

// The ranks of `ranks` that did not answer within window_s; `where` (when given) gets what each
// answering rank said of its whereabouts.
std::vector<int> unanswered(const std::vector<int>& ranks, double window_s, const std::function<bool()>& cut_short,
                            std::map<int, std::string>* where = nullptr) {
  std::vector<int> lost;
  if (ranks.empty()) return lost;
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return ranks;  // cannot probe: nobody answered
  const uint32_t seq = g_seq.fetch_add(1);
  std::vector<char> got(g_contacts.size(), 0);
  auto send_pings = [&] {
    for (int r : ranks) {
      if (got[static_cast<size_t>(r)]) continue;
      Msg m{kMagic, kPing, g_contacts[static_cast<size_t>(r)].id, r, seq};
      send_to_rank(fd, r, &m, sizeof m);
    }
  };
  const double end = now_s() + window_s;
  double next_send = 0;
  size_t left = ranks.size();
  while (left > 0) {
    const double t = now_s();
    if (t >= end || (cut_short && cut_short())) break;
    if (t >= next_send) {
      send_pings();
      next_send = t + kResendS;
    }
    pollfd p{fd, POLLIN, 0};
    const double wait = std::min({end, next_send, t + kPollS}) - t;
    if (::poll(&p, 1, std::max(1, static_cast<int>(wait * 1000))) <= 0) continue;
    Pong pong{};
    for (ssize_t n; (n = ::recv(fd, &pong, sizeof pong, 0)) >= static_cast<ssize_t>(sizeof(Msg));) {
      const Msg& m = pong.head;
      if (m.magic != kMagic || m.kind != kPong || m.seq != seq || m.rank < 0 ||
          m.rank >= static_cast<int>(g_contacts.size()) || m.id != g_contacts[static_cast<size_t>(m.rank)].id ||
          got[static_cast<size_t>(m.rank)])
        continue;
      got[static_cast<size_t>(m.rank)] = 1;
      if (where) {
        std::string text(pong.text, static_cast<size_t>(n) - sizeof(Msg));
        for (char& c : text)
          if (c < 0x20 || c == 0x7f) c = '?';  // a peer's bytes go into a message: printable only
        (*where)[m.rank] = std::move(text);
      }
      if (std::find(ranks.begin(), ranks.end(), m.rank) != ranks.end()) --left;
    }
  }
  ::close(fd);
  for (int r : ranks)
    if (!got[static_cast<size_t>(r)]) lost.push_back(r);
  return lost;
}

}  // namespace

bool peer_beacon_attach(MPI_Comm world, int rank, const std::vector<std::string>& hosts) {
  if (g_ready.load() || g_fd >= 0) return g_ready.load();
  int size = 0;
  MPI_Comm_size(world, &size);
  int ok = 1;
  std::string why;  // why this rank cannot use the beacon (its start-up warning)
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in any{};
  any.sin_family = AF_INET;
  any.sin_addr.s_addr = htonl(INADDR_ANY);
  any.sin_port = 0;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&any), sizeof any) != 0) {
    ok = 0;
    why = std::string("could not open a UDP socket: ") + std::strerror(errno);
  }
  std::random_device rd;
  const uint64_t id = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(::getpid());
  Contact mine = ok ? local_contact(fd, id) : Contact{};
  std::vector<Contact> all(static_cast<size_t>(size));
  if (MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, world) != MPI_SUCCESS) {
    if (fd >= 0) ::close(fd);
    return false;
  }
  g_fd = fd;
  g_rank = rank;
  g_contacts = std::move(all);
  g_hosts = hosts;
  if (static_cast<int>(g_hosts.size()) != size) ok = 0;
  if (ok) std::thread(answer_loop, fd, id, rank).detach();
  // Every rank checks that the next one answers (a firewall dropping UDP between nodes shows here).
  const int next = (rank + 1) % size;
  if (ok && size > 1 && !unanswered({next}, kAttachCheckS, {}).empty()) {
    ok = 0;
    char b[64];
    std::snprintf(b, sizeof b, "%.1f", kAttachCheckS);
    why = "rank " + std::to_string(next) + " on " + g_hosts[static_cast<size_t>(next)] +
          " did not answer a UDP probe within " + b + " s (is UDP dropped between the nodes?)";
  }
  int all_ok = 0;
  if (MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, world) != MPI_SUCCESS) all_ok = 0;
  g_ready = all_ok == 1;
  // Not a silent fallback: the ranks that found the fault say what it costs.
  if (!why.empty()) {
    const std::string host = rank < static_cast<int>(g_hosts.size()) ? g_hosts[static_cast<size_t>(rank)] : "?";
    const std::string line = "hpctrain: warning (rank " + std::to_string(rank) + " on " + host + "): " + why +
                             "; lost peers are probed over MPI instead, which can hang until the launcher's "
                             "SIGKILL when a node dies: allow UDP between the nodes' addresses "
                             "(docs/exit_codes.md#lost-peers)\n";
    log_raw_err(line);
  }
  return g_ready.load();
}

bool peer_beacon_ready() { return g_ready.load(); }

void peer_beacon_notify_gave_up(const std::vector<int>& peers, const std::vector<int>& lost) {
  if (!g_ready.load()) return;
  Notice m{};
  m.magic = kMagic;
  m.kind = kGaveUp;
  m.rank = g_rank;
  m.nlost = static_cast<uint32_t>(lost.size());
  m.nlisted = static_cast<uint32_t>(std::min<size_t>(lost.size(), kNoticeRanks));
  std::copy(lost.begin(), lost.begin() + m.nlisted, m.lost);
  const size_t len = kNoticeHeader + m.nlisted * sizeof(int32_t);
  // Three rounds 20 ms apart: a datagram can be lost; a receiver keeps only the first notice.
  for (int round = 0; round < 3; ++round) {
    if (round) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    for (int r : peers) {
      if (r < 0 || r >= static_cast<int>(g_contacts.size()) || r == g_rank) continue;
      m.id = g_contacts[static_cast<size_t>(r)].id;
      send_to_rank(g_fd, r, &m, len);
    }
  }
}

std::optional<PeerNotice> peer_beacon_notice() {
  std::lock_guard lk(g_notice_mu);  // asked every 0.1 s by the guard's watchdog: a lock is cheap enough
  return g_notice;
}

std::vector<int> peer_beacon_unanswered(double window_s, const std::function<bool()>& cut_short,
                                        std::map<int, std::string>* whereabouts) {
  if (!g_ready.load()) return {};
  std::vector<int> peers;
  for (int r = 0; r < static_cast<int>(g_contacts.size()); ++r)
    if (r != g_rank) peers.push_back(r);
  return unanswered(peers, window_s, cut_short, whereabouts);
}

}  // namespace ht
