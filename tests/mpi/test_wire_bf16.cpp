// The bf16 gradient wire and the fused unscale of MpiCommunicator (dist.grad_dtype, loss scaling)
// under mpirun: each rank's values rounded to bf16, summed in float32 with one rounding per partial
// sum, widened, divided by world_size x scale; identical bits on every rank.
#include <catch2/catch.hpp>
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "mpi/bucketer.hpp"
#include "mpi/mpi_communicator.hpp"
#include "mpi_test_world.hpp"
#include "mpi/wire_bf16.hpp"

using namespace ht;

namespace {
using ht::test::world_rank;
using ht::test::world_size;
// Values that are not bf16 numbers: each rank's rounding matters.
float value(size_t i, int rank) { return 1.0f + 0.001953125f * 0.37f * static_cast<float>(i % 97) + 0.3f * rank; }
}  // namespace

TEST_CASE("bf16 wire: averages round each rank's values to bf16 and agree bit for bit", "[comm][bf16]") {
  const int n = world_size(), rank = world_rank();
  MpiCommunicator comm(MPI_COMM_WORLD);
  comm.set_wire_dtype(WireDType::bf16);
  const size_t count = 1000;
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = value(i, rank);
  comm.start_allreduce_average(v);
  comm.wait_all();
  long long wrong = 0, not_bf16 = 0;
  for (size_t i = 0; i < count; ++i) {
    // Every rank's value is positive: the exact average lies within n-1 roundings of 2^-8 relative (unit roundoff of 8 significant bits).
    double exact = 0;
    for (int r = 0; r < n; ++r) exact += wire::f32_from_bf16(wire::bf16_from_f32(value(i, r)));
    exact /= n;
    if (std::abs(v[i] - exact) > (n - 1) * 0x1p-8 * exact + 1e-7) ++wrong;
    // The sum is a bf16 number: the average times n is one (exactly, for n a power of two).
    const float sum = v[i] * static_cast<float>(n);
    if (wire::f32_from_bf16(wire::bf16_from_f32(sum)) != sum) ++not_bf16;
  }
  CHECK(wrong == 0);
  if ((n & (n - 1)) == 0) CHECK(not_bf16 == 0);
  // Identical on every rank (the replicas must stay bitwise equal).
  std::vector<float> root = v;
  MPI_Bcast(root.data(), static_cast<int>(count), MPI_FLOAT, 0, MPI_COMM_WORLD);
  CHECK(std::memcmp(root.data(), v.data(), count * sizeof(float)) == 0);
  // With 2 ranks the result is exactly bf16(bf16(a) + bf16(b)) / 2.
  if (n == 2)
    for (size_t i = 0; i < count; i += 37) {
      const float a = wire::f32_from_bf16(wire::bf16_from_f32(value(i, 0)));
      const float b = wire::f32_from_bf16(wire::bf16_from_f32(value(i, 1)));
      CHECK(v[i] == wire::f32_from_bf16(wire::bf16_from_f32(a + b)) / 2.0f);
    }
}

TEST_CASE("fused unscale: the average divided by the loss scale equals the average, then the division", "[comm][bf16]") {
  const int n = world_size(), rank = world_rank();
  MpiCommunicator comm(MPI_COMM_WORLD);
  const size_t count = 513;
  std::vector<float> plain(count), scaled(count);
  for (size_t i = 0; i < count; ++i) {
    plain[i] = value(i, rank) * 3.7f;
    scaled[i] = plain[i] * 1024.0f;  // exact: a power of two
  }
  comm.start_allreduce_average(plain);
  comm.wait_all();
  CHECK(comm.set_average_unscale(1024.0f));
  comm.start_allreduce_average(scaled);
  comm.wait_all();
  CHECK(std::memcmp(plain.data(), scaled.data(), count * sizeof(float)) == 0);
  // Back to 1: later averages are plain again.
  comm.set_average_unscale(1.0f);
  std::vector<float> again(count);
  for (size_t i = 0; i < count; ++i) again[i] = value(i, rank) * 3.7f;
  comm.start_allreduce_average(again);
  comm.wait_all();
  CHECK(std::memcmp(plain.data(), again.data(), count * sizeof(float)) == 0);
  (void)n;
}

TEST_CASE("bf16 wire: buckets are sized in wire bytes", "[bucketer][bf16]") {
  MpiCommunicator comm(MPI_COMM_WORLD);
  // 16 parameters of 64 Ki floats (256 KiB in fp32, 128 KiB in bf16) and 1 MiB buckets.
  std::vector<ParamSlice> params;
  for (int i = 0; i < 16; ++i) params.push_back({int64_t{i} * 65536, 65536});
  std::vector<float> grads(16 * 65536, 1.0f);
  GradBucketer f32(comm, grads, params, 1.0);
  GradBucketer bf16(comm, grads, params, 1.0, WireDType::bf16);
  CHECK(f32.num_buckets() == 4);
  CHECK(bf16.num_buckets() == 2);
  CHECK(f32.stats().bytes_per_step == 16 * 65536 * 4);
  CHECK(bf16.stats().bytes_per_step == 16 * 65536 * 2);
  bf16.begin_step();
  for (int i = 15; i >= 0; --i) bf16.mark_ready(i);
  bf16.finish();
  CHECK(grads[0] == 1.0f);  // 1 is a bf16 number: the average of ones is exact
  CHECK(grads.back() == 1.0f);
}
