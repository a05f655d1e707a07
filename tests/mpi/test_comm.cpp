// MpiCommunicator under mpirun (2 and 4 ranks): exact collective results, overlap of the started
// average with the caller's work, isolation from the caller's own collectives, error and timeout paths.
#include <catch2/catch.hpp>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "mpi/gpu/communicator_factory.hpp"
#include "mpi/mpi_communicator.hpp"
#include "mpi_test_world.hpp"
#include "tests/unit/text_test_util.hpp"

using namespace ht;
using ht::test::check_mentions;

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

using ht::test::world_rank;
using ht::test::world_size;

// Rank r holds (r+1)*(i%7+1) (+ salt): small integers, so float sums are exact and so is the
// average for 2 and 4 ranks (it is a multiple of 0.25 well inside float precision).
std::vector<float> pattern(size_t n, int rank, int salt = 0) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>((rank + 1) * static_cast<int>(i % 7 + 1) + salt);
  return v;
}
float expected_sum(size_t i, int world, int salt = 0) {
  return static_cast<float>(static_cast<int>(i % 7 + 1) * world * (world + 1) / 2 + world * salt);
}

size_t count_wrong(const std::vector<float>& v, float (*want)(size_t, int, int), int world, int salt, float scale) {
  size_t bad = 0;
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] != want(i, world, salt) / scale) ++bad;
  return bad;
}

}  // namespace

TEST_CASE("comm: allreduce_sum, allreduce_average and broadcast give exact values", "[comm]") {
  MpiCommunicator comm;
  const int r = comm.rank(), n = comm.world_size();
  CHECK(r == world_rank());
  CHECK(n == world_size());
  CHECK(comm.name() == "mpi");
  for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}, size_t{262147}}) {
    INFO("count " << count);
    auto a = pattern(count, r);
    comm.allreduce_sum(a);
    CHECK(count_wrong(a, expected_sum, n, 0, 1.0f) == 0);

    auto b = pattern(count, r, 3);
    comm.allreduce_average(b);
    CHECK(count_wrong(b, expected_sum, n, 3, static_cast<float>(n)) == 0);

    for (int root = 0; root < n; ++root) {
      auto c = pattern(count, r);
      comm.broadcast(c, root);
      CHECK(c == pattern(count, root));
    }
  }
  std::vector<float> x(3);
  CHECK_THROWS_AS(comm.broadcast(x, n), RuntimeError);
}

TEST_CASE("comm: reduce_sum to a root and broadcast_bytes give exact values", "[comm]") {
  MpiCommunicator comm;
  const int r = comm.rank(), n = comm.world_size();
  for (size_t count : {size_t{0}, size_t{1}, size_t{1000}, size_t{262147}}) {
    INFO("count " << count);
    for (int root = 0; root < n; ++root) {
      auto a = pattern(count, r, root);
      comm.reduce_sum(a, root);
      if (r == root) CHECK(count_wrong(a, expected_sum, n, root, 1.0f) == 0);
    }
  }
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{3}, size_t{1} << 20}) {
    INFO("bytes " << bytes);
    for (int root = 0; root < n; ++root) {
      // The root's message, of its length; the others start with something else of another length.
      std::vector<char> b(r == root ? bytes : 17 + r, static_cast<char>('a' + r));
      for (size_t i = 0; r == root && i < b.size(); ++i) b[i] = static_cast<char>(i * 7 + root);
      comm.broadcast_bytes(b, root);
      REQUIRE(b.size() == bytes);
      size_t bad = 0;
      for (size_t i = 0; i < b.size(); ++i) bad += b[i] != static_cast<char>(i * 7 + root);
      CHECK(bad == 0);
    }
  }
  std::vector<float> x(3);
  std::vector<char> y(3);
  CHECK_THROWS_AS(comm.reduce_sum(x, n), RuntimeError);
  CHECK_THROWS_AS(comm.broadcast_bytes(y, -1), RuntimeError);
}

TEST_CASE("comm: several started averages complete in order with exact values", "[comm]") {
  MpiCommunicator comm;
  const int r = comm.rank(), n = comm.world_size();
  for (int step = 0; step < 3; ++step) {
    std::vector<std::vector<float>> bufs;
    for (int k = 0; k < 6; ++k) bufs.push_back(pattern(static_cast<size_t>(1000 * (k + 1) + 3), r, k));
    for (auto& b : bufs) comm.start_allreduce_average(b);
    double waited = comm.wait_all();
    CHECK(waited >= 0.0);
    for (int k = 0; k < 6; ++k) CHECK(count_wrong(bufs[static_cast<size_t>(k)], expected_sum, n, k, static_cast<float>(n)) == 0);
  }
  CHECK(comm.wait_all() >= 0.0);  // nothing started: returns at once
}

TEST_CASE("comm: a started average overlaps with the caller's work", "[comm]") {
  // Without overlap, wait_all would block about as long as the blocking average (B). With overlap the
  // average finishes while the caller "computes" (sleeps 4B + 300 ms), so wait_all blocks ~0. The
  // machine may be loaded by other jobs, which only slows the background average: up to 3 attempts,
  // all ranks deciding together.
  MpiCommunicator comm;
  const int r = comm.rank(), n = comm.world_size();
  const size_t count = size_t{2} << 20;  // 8 MiB
  bool overlapped = false;
  for (int attempt = 0; attempt < 3 && !overlapped; ++attempt) {
    double blocking_ms = 1e30;  // typical (minimum of two) blocking cost, slowest rank
    for (int k = 0; k < 2; ++k) {
      auto ref = pattern(count, r);
      MPI_Barrier(MPI_COMM_WORLD);
      auto t0 = Clock::now();
      comm.allreduce_average(ref);
      double ms = ms_since(t0), max_ms = 0;
      MPI_Allreduce(&ms, &max_ms, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      blocking_ms = std::min(blocking_ms, max_ms);
    }
    auto a = pattern(count, r);
    const double work_ms = 4 * blocking_ms + 300;
    MPI_Barrier(MPI_COMM_WORLD);
    auto t0 = Clock::now();
    comm.start_allreduce_average(a);
    double start_ms = ms_since(t0);
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(work_ms));  // "the rest of backward"
    double waited = comm.wait_all();
    CHECK(count_wrong(a, expected_sum, n, 0, static_cast<float>(n)) == 0);
    CHECK(start_ms < 0.25 * blocking_ms + 20);
    int ok = waited < 0.5 * blocking_ms ? 1 : 0, all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    overlapped = all_ok == 1;
    UNSCOPED_INFO("attempt " << attempt << ": blocking " << blocking_ms << " ms, start " << start_ms << " ms, work "
                             << work_ms << " ms, wait " << waited << " ms");
  }
  CHECK(overlapped);  // the average finished while we slept
}

TEST_CASE("comm: start returns at once and wait_all blocks until peers join", "[comm]") {
  MpiCommunicator comm;
  const int r = comm.rank(), n = comm.world_size();
  auto a = pattern(1000, r);
  MPI_Barrier(MPI_COMM_WORLD);
  if (r != 0) std::this_thread::sleep_for(std::chrono::milliseconds(400));  // peers start late
  auto t0 = Clock::now();
  comm.start_allreduce_average(a);
  double start_ms = ms_since(t0);
  double waited = comm.wait_all();
  CHECK(start_ms < 50);  // a blocking allreduce would take ~400 ms on rank 0
  if (r == 0) CHECK(waited > 250);
  CHECK(count_wrong(a, expected_sum, n, 0, static_cast<float>(n)) == 0);
}

TEST_CASE("comm: background averages never mix with the caller's collectives", "[comm]") {
  MpiCommunicator comm;
  const int r = comm.rank(), n = comm.world_size();
  for (int rep = 0; rep < 5; ++rep) {
    auto a = pattern(300000, r, 1);
    auto b = pattern(200000, r, 2);
    auto c = pattern(5000, r, 4);
    comm.start_allreduce_average(a);
    if ((r + rep) % 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    comm.allreduce_sum(b);  // caller's thread, other communicator, while `a` is in flight
    comm.start_allreduce_average(c);
    int one = 1, all = 0;  // and the world communicator itself
    MPI_Allreduce(&one, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    comm.wait_all();
    CHECK(all == n);
    CHECK(count_wrong(a, expected_sum, n, 1, static_cast<float>(n)) == 0);
    CHECK(count_wrong(b, expected_sum, n, 2, 1.0f) == 0);
    CHECK(count_wrong(c, expected_sum, n, 4, static_cast<float>(n)) == 0);
  }
}

TEST_CASE("comm: an error in the communication thread surfaces on the caller as RuntimeError", "[comm]") {
  MpiCommunicator comm;
  const int r = comm.rank();
  auto a = pattern(100, r), b = pattern(100, r), c = pattern(100, r);
  comm.inject_failure_for_test(1);  // every rank: the second started operation fails
  comm.start_allreduce_average(a);
  comm.start_allreduce_average(b);
  comm.start_allreduce_average(c);
  try {
    comm.wait_all();
    FAIL("wait_all did not throw");
  } catch (const RuntimeError& e) {
    std::string msg = e.what();
    check_mentions(msg, {"rank " + std::to_string(r), "allreduce_average #1", "injected failure"});
  }
  CHECK(count_wrong(a, expected_sum, comm.world_size(), 0, static_cast<float>(comm.world_size())) == 0);
  CHECK(b == pattern(100, r));  // the failed one and the one after it were not reduced
  CHECK(c == pattern(100, r));
  CHECK_THROWS_AS(comm.start_allreduce_average(a), RuntimeError);  // the failure is sticky
  CHECK_THROWS_AS(comm.wait_all(), RuntimeError);
}

TEST_CASE("comm: wait_all times out naming rank and operation when a peer stalls", "[comm]") {
  const int r = world_rank();
  {
    auto a = pattern(1000, r);  // declared first: it must outlive the operation still in flight
    MpiCommunicator comm(MPI_COMM_WORLD, Device::cpu, r == 0 ? 0.3 : 0);
    MPI_Barrier(MPI_COMM_WORLD);
    if (r == 0) {
      comm.start_allreduce_average(a);
      auto t0 = Clock::now();
      try {
        comm.wait_all();
        FAIL("wait_all did not time out");
      } catch (const RuntimeError& e) {
        std::string msg = e.what();
        check_mentions(msg, {"rank 0", "timed out", "allreduce_average"});
      }
      double ms = ms_since(t0);
      CHECK(ms > 250);
      CHECK(ms < 1000);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // the "stalled" peers join late
      comm.start_allreduce_average(a);
      comm.wait_all();
      CHECK(count_wrong(a, expected_sum, comm.world_size(), 0, static_cast<float>(comm.world_size())) == 0);
    }
  }  // rank 0's destructor waits for its late operation to finish, then frees the communicators
  MPI_Barrier(MPI_COMM_WORLD);
}

#if !defined(HT_HAVE_CUDA)
TEST_CASE("comm: device data is staged through host buffers (fake device allocator)", "[comm]") {
  // Stand-in "cuda" allocator on host memory that counts copies, to test the staging logic on CPU.
  static int d2h = 0, h2d = 0;
  DeviceAllocator fake;
  fake.alloc = [](size_t b) { return std::malloc(b ? b : 1); };
  fake.free = [](void* p) { std::free(p); };
  fake.copy = [](void* dst, const void* src, size_t bytes, Device dd, Device sd) {
    if (dd == Device::cpu && sd == Device::cuda) ++d2h;
    if (dd == Device::cuda && sd == Device::cpu) ++h2d;
    std::memcpy(dst, src, bytes);
  };
  fake.zero = [](void* p, size_t b) { std::memset(p, 0, b); };
  register_allocator(Device::cuda, fake);
  {
    MpiCommunicator comm(MPI_COMM_WORLD, Device::cuda);
    const int r = comm.rank(), n = comm.world_size();
    CHECK(comm.device() == Device::cuda);
    auto a = pattern(5000, r), b = pattern(7000, r, 1), c = pattern(300, r, 2);
    comm.allreduce_sum(a);
    CHECK(count_wrong(a, expected_sum, n, 0, 1.0f) == 0);
    CHECK((d2h == 1 && h2d == 1));
    comm.start_allreduce_average(b);
    comm.start_allreduce_average(c);
    CHECK(d2h == 3);
    comm.wait_all();
    CHECK(h2d == 3);
    CHECK(count_wrong(b, expected_sum, n, 1, static_cast<float>(n)) == 0);
    CHECK(count_wrong(c, expected_sum, n, 2, static_cast<float>(n)) == 0);
  }
  register_allocator(Device::cuda, DeviceAllocator{});
}
#endif

TEST_CASE("comm: make_communicator picks MPI on CPU", "[comm]") {
  auto c = make_communicator(Device::cpu, false, 5.0);
  CHECK(c->name() == "mpi");
  CHECK(c->device() == Device::cpu);
  CHECK(c->world_size() == world_size());
  std::vector<float> v = pattern(10, c->rank());
  c->allreduce_sum(v);
  CHECK(count_wrong(v, expected_sum, c->world_size(), 0, 1.0f) == 0);
#if !defined(HT_HAVE_CUDA)
  CHECK_THROWS_AS(make_communicator(Device::cuda, false, 5.0), RuntimeError);
#endif
}
