// hpctrain prepare --format fashion-mnist|cifar10 --input DIR --output DIR [--shards N]
//   [--test-shards N] [--gzip L]: converts a public dataset to the shard schema of docs/dataset.md.
// The test split is written as --test-shards files (default 1, i.e. DIR/test-00000-of-00001.h5);
// --shards applies to the train split only. Only rank 0 converts when run under mpirun.
#include <cstdio>
#include <iostream>

#include "io/dataset_prepare.hpp"
#include "mpi/dist.hpp"
#include "src/cli/commands.hpp"
#include "src/base/error.hpp"

namespace ht {

namespace {
const char* kUsage =
    "usage: hpctrain prepare --format fashion-mnist|cifar10 --input DIR --output DIR [--shards N]\n"
    "                        [--test-shards N] [--gzip LEVEL]\n"
    "  fashion-mnist: {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] (Debian: /usr/share/datasets/fashion-mnist)\n"
    "  cifar10:       data_batch_1..5.bin, test_batch.bin (the binary version), in DIR or DIR/cifar-10-batches-bin\n"
    "  --shards N       train shards (default 1); --test-shards N test shards (default 1)\n"
    "  --gzip LEVEL     gzip /images (default 0: uncompressed)\n";

int parse_int(const std::string& flag, const std::string& v) {
  try {
    size_t pos = 0;
    int x = std::stoi(v, &pos);
    if (pos == v.size()) return x;
  } catch (...) {
  }
  throw UsageError("hpctrain prepare: " + flag + " '" + v + "' is not an integer");
}
}  // namespace

int cmd_prepare(const Args& args) {
  PrepareOptions opt;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      return kExitOk;
    }
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) throw UsageError("hpctrain prepare: " + a + " needs a value\n" + kUsage);
      return args[++i];
    };
    if (a == "--format") opt.format = value();
    else if (a == "--input") opt.input = value();
    else if (a == "--output") opt.output = value();
    else if (a == "--shards") opt.shards = parse_int(a, value());
    else if (a == "--test-shards") opt.test_shards = parse_int(a, value());
    else if (a == "--gzip") opt.gzip = parse_int(a, value());
    else throw UsageError("hpctrain prepare: unknown option '" + a + "'\n" + kUsage);
  }
  if (opt.format.empty() || opt.input.empty() || opt.output.empty())
    throw UsageError(std::string("hpctrain prepare: --format, --input and --output are required\n") + kUsage);
  if (dist().rank != 0) return kExitOk;
  PrepareResult r = prepare_dataset(opt);
  std::printf("prepared %s: %lld train, %lld test samples\n", opt.format.c_str(),
              static_cast<long long>(r.train_samples), static_cast<long long>(r.test_samples));
  std::printf("train mean/std per channel:");
  for (size_t c = 0; c < r.mean.size(); ++c) std::printf(" %.6f/%.6f", r.mean[c], r.std[c]);
  std::printf("\n");
  for (auto& f : r.files) std::printf("  wrote %s\n", f.c_str());
  return kExitOk;
}

}  // namespace ht
