#include "mpi/dist.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <thread>

#include "mpi/check.hpp"
#include "mpi/collective_guard.hpp"
#include "base/log.hpp"

namespace ht {
namespace {
DistContext g_ctx;
bool g_inited = false;
}  // namespace

void dist_init(int* argc, char*** argv) {
  if (g_inited) return;
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    int provided = 0;
    CollectiveWait wait("MPI_Init");
    HT_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
    if (provided < MPI_THREAD_MULTIPLE)
      throw RuntimeError("MPI_Init_thread: this MPI library gives thread level " + std::to_string(provided) +
                         ", hpctrain needs MPI_THREAD_MULTIPLE");
  }
  // Errors come back as codes so the check macros can name rank, host and file:line.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  HT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &g_ctx.rank));
  set_message_rank(g_ctx.rank);  // error messages of every layer name this rank
  HT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &g_ctx.world_size));
  {
    CollectiveWait wait("MPI_Comm_split_type (start-up)");
    HT_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_ctx.rank, MPI_INFO_NULL, &g_ctx.local));
  }
  HT_MPI_CHECK(MPI_Comm_rank(g_ctx.local, &g_ctx.local_rank));
  HT_MPI_CHECK(MPI_Comm_size(g_ctx.local, &g_ctx.local_size));
  char host[MPI_MAX_PROCESSOR_NAME] = {0};
  int len = 0;
  HT_MPI_CHECK(MPI_Get_processor_name(host, &len));
  g_ctx.host.assign(host, static_cast<size_t>(len));
  set_log_identity(g_ctx.rank, g_ctx.world_size, g_ctx.host);
  std::vector<char> all(static_cast<size_t>(g_ctx.world_size) * MPI_MAX_PROCESSOR_NAME, 0);
  {
    CollectiveWait wait("MPI_Allgather of the host names (start-up)");
    HT_MPI_CHECK(MPI_Allgather(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR,
                               MPI_COMM_WORLD));
  }
  g_ctx.hosts.clear();
  for (int r = 0; r < g_ctx.world_size; ++r) g_ctx.hosts.emplace_back(&all[static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME]);
  // The peers' hosts name lost ranks in messages; the probes need their own communicator.
  collective_guard_attach(MPI_COMM_WORLD, g_ctx.rank, g_ctx.hosts);
  g_inited = true;
}

const DistContext& dist() { return g_ctx; }

void dist_finalize(int code) {
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (inited && !finalized) {
    collective_guard_detach();
    // MPI_Finalize synchronises with the peers: bounded, it ends the rank with `code` if one is lost.
    CollectiveWait wait("MPI_Finalize", WaitKind::bounded, code);
    if (g_ctx.local != MPI_COMM_NULL) MPI_Comm_free(&g_ctx.local);
    MPI_Finalize();
  }
}

void dist_abort(int code) {
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (inited && !finalized) {
    // MPI_Abort can block on a broken job (TCP to a lost node, PMIx to a lost server): bounded.
    std::thread([code] {
      std::this_thread::sleep_for(std::chrono::duration<double>(kAbortGraceS));
      exit_without_mpi(code);
    }).detach();
    MPI_Abort(MPI_COMM_WORLD, code);
  }
  std::_Exit(code);
}

namespace {
// One value reduced over MPI_COMM_WORLD inside a CollectiveWait named `what`.
template <class T>
T allreduce_one(T v, MPI_Datatype type, MPI_Op op, const char* what, WaitKind kind = WaitKind::bounded) {
  T out{};
  CollectiveWait wait(what, kind);
  HT_MPI_CHECK(MPI_Allreduce(&v, &out, 1, type, op, MPI_COMM_WORLD));
  return out;
}
}  // namespace

bool dist_any(bool flag, WaitKind kind) {
  return allreduce_one(flag ? 1 : 0, MPI_INT, MPI_LOR, "dist_any (MPI_Allreduce)", kind) != 0;
}

long long dist_max(long long v) { return allreduce_one(v, MPI_LONG_LONG, MPI_MAX, "dist_max (MPI_Allreduce)"); }
double dist_max(double v) { return allreduce_one(v, MPI_DOUBLE, MPI_MAX, "dist_max (MPI_Allreduce)"); }

void dist_barrier(const char* what) {
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) return;
  CollectiveWait wait(what, WaitKind::while_peers_answer);
  HT_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
}

double dist_sum(double v) { return allreduce_one(v, MPI_DOUBLE, MPI_SUM, "dist_sum (MPI_Allreduce)"); }

std::pair<uint64_t, uint64_t> dist_min_max(uint64_t v, const char* what) {
  uint64_t lo = v, hi = v;
  CollectiveWait wait(what);
  HT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD));
  HT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD));
  return {lo, hi};
}

uint32_t dist_bitwise_or(uint32_t flags, const char* what, WaitKind kind) {
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (!inited || finalized) return flags;
  return allreduce_one(flags, MPI_UINT32_T, MPI_BOR, what, kind);
}

std::vector<std::string> dist_allgather_strings(const std::string& mine, const char* what, WaitKind kind) {
  if (g_ctx.world_size == 1) return {mine};
  return allgather_strings(MPI_COMM_WORLD, mine, what, kind);
}

std::vector<std::string> allgather_strings(MPI_Comm comm, const std::string& mine, const char* what, WaitKind kind) {
  int n = 1;
  HT_MPI_CHECK(MPI_Comm_size(comm, &n));
  if (n == 1) return {mine};
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(static_cast<size_t>(n)), displs(static_cast<size_t>(n));
  CollectiveWait wait(what, kind);
  HT_MPI_CHECK(MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, comm));
  int total = 0;
  for (int r = 0; r < n; ++r) {
    displs[static_cast<size_t>(r)] = total;
    total += lens[static_cast<size_t>(r)];
  }
  std::vector<char> all(static_cast<size_t>(std::max(total, 1)));
  HT_MPI_CHECK(MPI_Allgatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, comm));
  std::vector<std::string> out;
  for (int r = 0; r < n; ++r)
    out.emplace_back(all.data() + displs[static_cast<size_t>(r)], static_cast<size_t>(lens[static_cast<size_t>(r)]));
  return out;
}

void dist_broadcast(std::vector<char>& bytes, const char* what, WaitKind kind) {
  if (g_ctx.world_size == 1) return;
  CollectiveWait wait(what, kind);
  HT_MPI_CHECK(MPI_Bcast(bytes.data(), static_cast<int>(bytes.size()), MPI_CHAR, 0, MPI_COMM_WORLD));
}

std::vector<double> dist_gather_to_root(const std::vector<double>& mine, const char* what) {
  const int n = g_ctx.world_size;
  if (n == 1) return mine;
  const int k = static_cast<int>(mine.size());
  std::vector<double> all(g_ctx.rank == 0 ? static_cast<size_t>(k) * static_cast<size_t>(n) : 0);
  CollectiveWait wait(what);
  HT_MPI_CHECK(MPI_Gather(mine.data(), k, MPI_DOUBLE, all.data(), k, MPI_DOUBLE, 0, MPI_COMM_WORLD));
  return all;
}

std::string mpi_library_version() {
  char buf[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0;
  if (MPI_Get_library_version(buf, &len) != MPI_SUCCESS) return "unknown";
  std::string s(buf, static_cast<size_t>(len));
  if (auto nl = s.find('\n'); nl != std::string::npos) s.resize(nl);
  while (!s.empty() && (s.back() == '\0' || std::isspace(static_cast<unsigned char>(s.back())))) s.pop_back();
  return s;
}

std::string mpi_build_version() {
  const std::string mpi = "MPI " + std::to_string(MPI_VERSION) + "." + std::to_string(MPI_SUBVERSION);
#if defined(OMPI_MAJOR_VERSION)
  return "Open MPI " + std::to_string(OMPI_MAJOR_VERSION) + "." + std::to_string(OMPI_MINOR_VERSION) + "." +
         std::to_string(OMPI_RELEASE_VERSION) + ", " + mpi;
#else
  return mpi;
#endif
}

}  // namespace ht
