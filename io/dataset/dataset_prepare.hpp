#pragma once
// `hpctrain prepare`: public datasets to the shard schema of docs/dataset.md.
#include <cstdint>
#include <string>
#include <vector>

namespace ht {

struct PrepareOptions {
  std::string format;  ///< "fashion-mnist" or "cifar10"
  std::string input, output;
  int shards = 1;       ///< train shards
  int test_shards = 1;  ///< test shards (default 1: DIR/test-00000-of-00001.h5)
  int gzip = 0;         ///< gzip level for /images (0 = uncompressed, the schema default)
};

struct PrepareResult {
  int64_t train_samples = 0, test_samples = 0;
  std::vector<float> mean, std;
  std::vector<std::string> files;
};

/// Converts. Fashion-MNIST: {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] in input; CIFAR-10:
/// data_batch_1..5.bin and test_batch.bin in input or input/cifar-10-batches-bin. mean/std from the
/// train split. Throws UsageError naming the file for missing or invalid input.
PrepareResult prepare_dataset(const PrepareOptions& opt);

/// Fashion-MNIST class names, label order.
const std::vector<std::string>& fashion_mnist_classes();
/// CIFAR-10 class names, label order.
const std::vector<std::string>& cifar10_classes();

}  // namespace ht
