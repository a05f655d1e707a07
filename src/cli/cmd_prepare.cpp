// hpctrain prepare --format fashion-mnist|cifar10 --input DIR --output DIR [--shards N]
//   [--test-shards N] [--gzip L]: converts a public dataset to the shard schema of docs/dataset.md.
// The test split is written as --test-shards files (default 1, i.e. DIR/test-00000-of-00001.h5);
// --shards applies to the train split only. Only rank 0 converts when run under mpirun.
#include <string>

#include "io/dataset/dataset_prepare.hpp"
#include "mpi/dist.hpp"
#include "src/cli/cli_options.hpp"
#include "src/cli/commands.hpp"
#include "base/error.hpp"
#include "base/log.hpp"

namespace ht {

int cmd_prepare(const Args& args) {
  PrepareOptions opt;
  CommandLine cl("hpctrain prepare",
                 "usage: hpctrain prepare --format fashion-mnist|cifar10 --input DIR --output DIR [--shards N]\n"
                 "                        [--test-shards N] [--gzip LEVEL]\n"
                 "  fashion-mnist: {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] (Debian: /usr/share/datasets/fashion-mnist)\n"
                 "  cifar10:       data_batch_1..5.bin, test_batch.bin (the binary version), in DIR or DIR/cifar-10-batches-bin");
  cl.option("format", &opt.format, "FORMAT", "fashion-mnist or cifar10")
      .option("input", &opt.input, "DIR", "the downloaded files")
      .option("output", &opt.output, "DIR", "where the shards are written")
      .option("shards", &opt.shards, "N", "train shards")
      .option("test-shards", &opt.test_shards, "N", "test shards")
      .option("gzip", &opt.gzip, "LEVEL", "gzip level of /images, 0 for uncompressed");
  if (!cl.parse(args)) return kExitOk;
  if (opt.format.empty() || opt.input.empty() || opt.output.empty()) cl.fail("--format, --input and --output are required");
  if (dist().rank != 0) return kExitOk;
  PrepareResult r = prepare_dataset(opt);
  log_raw_out(strf("prepared %s: %lld train, %lld test samples", opt.format.c_str(),
                   static_cast<long long>(r.train_samples), static_cast<long long>(r.test_samples)));
  std::string line = "train mean/std per channel:";
  for (size_t c = 0; c < r.mean.size(); ++c) line += strf(" %.6f/%.6f", r.mean[c], r.std[c]);
  log_raw_out(line);
  for (auto& f : r.files) log_raw_out("  wrote " + f);
  return kExitOk;
}

}  // namespace ht
