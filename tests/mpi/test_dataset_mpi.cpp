// Sampling across real MPI ranks: each epoch covers every sample once, and the samples of every
// global step equal the single-rank loader's global batch, in rank order.
#include <catch2/catch.hpp>
#include <mpi.h>

#include <algorithm>
#include <numeric>

#include "io/dataset/dataset.hpp"

using namespace ht;

TEST_CASE("dataset: ranks together see each global batch of the 1-rank loader", "[dataset]") {
  int rank = 0, ws = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ws);
  const int64_t N = 20, B = 4;
  REQUIRE(B % ws == 0);
  auto ds = make_synthetic_dataset(N, 3, 3, 1, 4, 5, "train");
  LoaderOptions o;
  o.global_batch = B;
  o.rank = rank;
  o.world_size = ws;
  o.seed = 2024;
  DataLoader mine(ds, o);
  LoaderOptions o1 = o;
  o1.rank = 0;
  o1.world_size = 1;
  DataLoader single(ds, o1);
  for (int epoch = 0; epoch < 3; ++epoch) {
    mine.start_epoch(epoch);
    single.start_epoch(epoch);
    Batch b, s;
    std::vector<int64_t> epoch_all;
    while (mine.next(b)) {
      REQUIRE(single.next(s));
      std::vector<int64_t> gathered(static_cast<size_t>(B));
      REQUIRE(static_cast<int64_t>(b.indices.size()) == B / ws);
      MPI_Allgather(b.indices.data(), static_cast<int>(B / ws), MPI_INT64_T, gathered.data(), static_cast<int>(B / ws),
                    MPI_INT64_T, MPI_COMM_WORLD);
      CHECK(gathered == s.indices);
      epoch_all.insert(epoch_all.end(), gathered.begin(), gathered.end());
    }
    CHECK_FALSE(single.next(s));
    std::sort(epoch_all.begin(), epoch_all.end());
    std::vector<int64_t> want(N);
    std::iota(want.begin(), want.end(), 0);
    CHECK(epoch_all == want);
  }
}
