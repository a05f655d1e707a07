// Checkpoint groups keep their links compact (io/checkpoint/checkpoint_encode.cpp, create_compact_groups): in
// the checksummed object header, never in HDF5's unchecksummed dense storage (fractal heap), whose
// damaged blocks crash HDF5 1.10's parser.
#include <catch2/catch.hpp>

#include <hdf5.h>
#include <unistd.h>

#include <filesystem>
#include <mutex>
#include <string>

#include "io/checkpoint/checkpoint_format.hpp"
#include "io/h5.hpp"
#include "base/tensor.hpp"

using namespace ht;
namespace fs = std::filesystem;

TEST_CASE("checkpoint groups: links compact in the object header, also past HDF5's 8-link default",
          "[checkpoint]") {
  CheckpointData d;
  for (int i = 0; i < 40; ++i) {  // 40 links per group: HDF5's default would go dense after 8
    d.tensors.emplace_back("param/layer" + std::to_string(i) + ".weight", Tensor::zeros({3}));
    d.tensors.emplace_back("momentum/layer" + std::to_string(i) + ".weight", Tensor::zeros({3}));
    d.tensors.emplace_back("rank_buffer/1/bn" + std::to_string(i) + ".running_mean", Tensor::zeros({2}));
  }
  for (int i = 0; i < 12; ++i) d.ints["counter" + std::to_string(i)] = i;
  d.strings["model"] = "mlp";
  const std::string path = (fs::temp_directory_path() / ("ht_ckpt_groups_" + std::to_string(::getpid()) + ".h5")).string();
  write_checkpoint_file(path, d);
  {
    std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
    hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    REQUIRE(f >= 0);
    for (const char* g : {"param", "momentum", "rank_buffer", "rank_buffer/1", "ints", "strings", "meta"}) {
      INFO(g);
      H5G_info_t gi{};
      REQUIRE(H5Gget_info_by_name(f, g, &gi, H5P_DEFAULT) >= 0);
      CHECK(gi.storage_type == H5G_STORAGE_TYPE_COMPACT);
    }
    H5G_info_t gi{};
    REQUIRE(H5Gget_info_by_name(f, "param", &gi, H5P_DEFAULT) >= 0);
    CHECK(gi.nlinks == 40);
    H5Fclose(f);
  }
  // Reading back through the validating reader: the [checkpoint] round-trip tests, on files written
  // the same way.
  fs::remove(path);
}
