// hpctrain prepare --format fashion-mnist|cifar10|imagefolder --input DIR --output DIR [options]:
// converts a public dataset, or a user's folder of class folders of images, to the shard schema of
// docs/dataset.md. Fashion-MNIST and CIFAR-10: the test split is written as --test-shards files
// (default 1), --shards applies to the train split only, and only rank 0 converts under mpirun.
// imagefolder: every rank converts its share (src/cli/prepare_imagefolder.cpp).
#include <filesystem>
#include <string>

#include "io/dataset/dataset_prepare.hpp"
#include "mpi/dist.hpp"
#include "src/cli/cli_options.hpp"
#include "src/cli/commands.hpp"
#include "src/cli/prepare_imagefolder.hpp"
#include "base/error.hpp"
#include "base/log.hpp"

namespace ht {

int cmd_prepare(const Args& args) {
  PrepareOptions opt;
  ImageFolderPrepareOptions img;
  CommandLine cl("hpctrain prepare",
                 "usage: hpctrain prepare --format fashion-mnist|cifar10|imagefolder --input DIR --output DIR [--shards N]\n"
                 "                        [--test-shards N] [--gzip LEVEL] [imagefolder options]\n"
                 "  fashion-mnist: {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] (Debian: /usr/share/datasets/fashion-mnist)\n"
                 "  cifar10:       data_batch_1..5.bin, test_batch.bin (the binary version), in DIR or DIR/cifar-10-batches-bin\n"
                 "  imagefolder:   one folder of JPEG/PNG files per class (torchvision's ImageFolder), as DIR/train and\n"
                 "                 DIR/val, or DIR alone with --val-fraction; under mpirun every rank converts a share");
  cl.option("format", &opt.format, "FORMAT", "fashion-mnist, cifar10 or imagefolder")
      .option("input", &opt.input, "DIR", "the downloaded files, or the image folder")
      .option("output", &opt.output, "DIR", "where the shards are written")
      .option("shards", &img.shards, "N", "train shards (fashion-mnist, cifar10: 1; imagefolder: 1024 images each)", false)
      .option("test-shards", &img.test_shards, "N", "test shards (as --shards)", false)
      .option("gzip", &opt.gzip, "LEVEL", "gzip level of /images, 0 for uncompressed")
      .option("size", &img.size, "S", "imagefolder: stored side (shorter side resized to S, centre crop)")
      .option("channels", &img.channels, "C", "imagefolder: 3 (RGB) or 1 (gray)")
      .option("val-fraction", &img.val_fraction, "F", "imagefolder without DIR/train: share of each class for validation (0.1 if not given)", false)
      .option("seed", &img.seed, "N", "imagefolder: seed of the --val-fraction split")
      .option("threads", &img.threads, "T", "imagefolder: decoding threads per rank (0: cores / ranks on the host)")
      .option("max-pixels", &img.max_pixels, "P", "imagefolder: images declaring more pixels are skipped")
      .option("storage", &img.storage, "KIND", "imagefolder: raw (pixels) or encoded (the files' bytes, decoded when training)")
      .option("max-side", &img.max_side, "M", "imagefolder, encoded: files with a longer side above M stored re-encoded at M (0: originals)")
      .flag("strict", &img.strict, "imagefolder: a file that cannot be decoded is an error (exit 2), not skipped");
  if (!cl.parse(args)) return kExitOk;
  if (opt.format.empty() || opt.input.empty() || opt.output.empty()) cl.fail("--format, --input and --output are required");
  if (opt.format == "imagefolder") {
    img.input = opt.input;
    img.output = opt.output;
    img.gzip = opt.gzip;
    // Without DIR/train, a 10 % validation split unless told otherwise.
    if (!cl.given("val-fraction") && !std::filesystem::is_directory(opt.input + "/train")) img.val_fraction = 0.1;
    prepare_image_folder(img);
    return kExitOk;
  }
  for (const char* o : {"size", "channels", "val-fraction", "seed", "threads", "max-pixels", "strict", "storage", "max-side"})
    if (cl.given(o)) cl.fail(std::string("--") + o + " applies to --format imagefolder only");
  opt.shards = cl.given("shards") ? img.shards : 1;
  opt.test_shards = cl.given("test-shards") ? img.test_shards : 1;
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
