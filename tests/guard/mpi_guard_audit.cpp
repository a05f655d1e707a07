// An MPI profiling layer (the MPI standard's PMPI interface, MPI-3.1 section 14.2) linked into a
// second build of the hpctrain executable, hpctrain_guard_audit: every blocking MPI call the product
// makes goes through one of these definitions first. While the collective guard runs
// (mpi/collective_guard.hpp) each such call must be inside a CollectiveWait scope of its thread, or
// a lost peer leaves the rank waiting in it with no time limit (a rank blocked in an unguarded
// MPI_Gather was seen to outlive its job). A call outside every scope is printed once per call site
// with its stack:
//   hpctrain guard audit: rank R: MPI_Gather outside a CollectiveWait (call site K):
//     #1 ht::Watchdog::on_step(...)
// and MPI_Finalize prints the count:
//   hpctrain guard audit: rank R: N blocking MPI calls, M outside a CollectiveWait
// tests/guard/test_guard_audit.sh runs training, resume, preemption and doctor with it.
// The wrapped set is every blocking MPI function the product calls (grep the sources for MPI_);
// non-blocking ones (MPI_Isend, MPI_Irecv, MPI_Test, ...) cannot wait on a peer.
#include <cxxabi.h>
#include <execinfo.h>
#include <mpi.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>

#include "mpi/collective_guard.hpp"

namespace {

std::atomic<long> g_calls{0}, g_unguarded{0};
std::mutex g_mu;
std::set<std::string> g_sites;  // stacks already reported

int world_rank() {
  int init = 0, fin = 0, r = -1;
  PMPI_Initialized(&init);
  PMPI_Finalized(&fin);
  if (init && !fin) PMPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// "hpctrain_guard_audit(_ZN2ht8Watchdog7on_stepE...+0x1c4) [0x55...]" -> "ht::Watchdog::on_step(...)".
std::string frame_name(const char* sym) {
  std::string s(sym);
  const size_t open = s.find('('), plus = s.find('+', open == std::string::npos ? 0 : open);
  if (open == std::string::npos || plus == std::string::npos || plus == open + 1) return s;
  const std::string mangled = s.substr(open + 1, plus - open - 1);
  int status = 0;
  char* d = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
  std::string out = status == 0 && d ? d : mangled;
  std::free(d);
  return out;
}

void report(const char* fn) {
  void* frames[24];
  const int n = backtrace(frames, 24);
  char** syms = backtrace_symbols(frames, n);
  std::string stack;
  // The caller is the frame after the wrapper's (named fn; exported, so named in syms): where audit
  // and report show up above it depends on inlining and tail calls.
  int first = 0;
  for (int i = 0; syms && i < n; ++i)
    if (frame_name(syms[i]) == fn) first = i + 1;
  for (int i = first; i < n && i < first + 9; ++i)
    stack += "    #" + std::to_string(i - first + 1) + " " + (syms ? frame_name(syms[i]) : std::string("?")) + "\n";
  std::free(syms);
  {
    std::lock_guard lk(g_mu);
    if (!g_sites.insert(std::string(fn) + stack).second) return;
  }
  const std::string msg = "hpctrain guard audit: rank " + std::to_string(world_rank()) + ": " + fn +
                          " outside a CollectiveWait:\n" + stack;
  if (::write(2, msg.data(), msg.size()) < 0) return;
}

void audit(const char* fn) {
  ++g_calls;
  if (ht::collective_wait_open()) return;
  ++g_unguarded;
  report(fn);
}

}  // namespace

extern "C" {

int MPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
  audit("MPI_Init_thread");
  return PMPI_Init_thread(argc, argv, required, provided);
}

int MPI_Finalize(void) {
  audit("MPI_Finalize");
  const std::string msg = "hpctrain guard audit: rank " + std::to_string(world_rank()) + ": " +
                          std::to_string(g_calls.load()) + " blocking MPI calls, " +
                          std::to_string(g_unguarded.load()) + " outside a CollectiveWait\n";
  if (::write(2, msg.data(), msg.size()) < 0) {
  }
  return PMPI_Finalize();
}

int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  audit("MPI_Allreduce");
  return PMPI_Allreduce(sendbuf, recvbuf, count, type, op, comm);
}

int MPI_Reduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, int root,
               MPI_Comm comm) {
  audit("MPI_Reduce");
  return PMPI_Reduce(sendbuf, recvbuf, count, type, op, root, comm);
}

int MPI_Bcast(void* buf, int count, MPI_Datatype type, int root, MPI_Comm comm) {
  audit("MPI_Bcast");
  return PMPI_Bcast(buf, count, type, root, comm);
}

int MPI_Barrier(MPI_Comm comm) {
  audit("MPI_Barrier");
  return PMPI_Barrier(comm);
}

int MPI_Gather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
               MPI_Datatype recvtype, int root, MPI_Comm comm) {
  audit("MPI_Gather");
  return PMPI_Gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
}

int MPI_Gatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, const int recvcounts[],
                const int displs[], MPI_Datatype recvtype, int root, MPI_Comm comm) {
  audit("MPI_Gatherv");
  return PMPI_Gatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm);
}

int MPI_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                  MPI_Datatype recvtype, MPI_Comm comm) {
  audit("MPI_Allgather");
  return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}

int MPI_Allgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                   const int recvcounts[], const int displs[], MPI_Datatype recvtype, MPI_Comm comm) {
  audit("MPI_Allgatherv");
  return PMPI_Allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm);
}

int MPI_Send(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  audit("MPI_Send");
  return PMPI_Send(buf, count, type, dest, tag, comm);
}

int MPI_Recv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm, MPI_Status* status) {
  audit("MPI_Recv");
  return PMPI_Recv(buf, count, type, source, tag, comm, status);
}

int MPI_Comm_dup(MPI_Comm comm, MPI_Comm* newcomm) {
  audit("MPI_Comm_dup");
  return PMPI_Comm_dup(comm, newcomm);
}

int MPI_Comm_split_type(MPI_Comm comm, int split_type, int key, MPI_Info info, MPI_Comm* newcomm) {
  audit("MPI_Comm_split_type");
  return PMPI_Comm_split_type(comm, split_type, key, info, newcomm);
}

}  // extern "C"
