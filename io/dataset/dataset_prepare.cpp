// Converters for Fashion-MNIST (IDX) and CIFAR-10 (binary) to sharded HDF5.
#include "io/dataset/dataset_prepare.hpp"

#include <filesystem>

#include "io/dataset/cifar.hpp"
#include "io/dataset/dataset_h5.hpp"
#include "io/dataset/idx.hpp"
#include "base/error.hpp"

namespace fs = std::filesystem;

namespace ht {

const std::vector<std::string>& fashion_mnist_classes() {
  static const std::vector<std::string> v = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                             "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  return v;
}

const std::vector<std::string>& cifar10_classes() {
  static const std::vector<std::string> v = {"airplane", "automobile", "bird",  "cat",  "deer",
                                             "dog",      "frog",       "horse", "ship", "truck"};
  return v;
}

namespace {

struct Split {
  std::vector<uint8_t> images;
  std::vector<int32_t> labels;
};

std::string find_input(const std::string& dir, const std::string& name) {
  for (const std::string& cand : {name, name + ".gz"}) {
    fs::path p = fs::path(dir) / cand;
    if (fs::exists(p)) return p.string();
  }
  throw UsageError((fs::path(dir) / name).string() + "[.gz]: input file not found");
}

Split read_fmnist_split(const std::string& dir, const std::string& prefix) {
  std::string ipath = find_input(dir, prefix + "-images-idx3-ubyte");
  std::string lpath = find_input(dir, prefix + "-labels-idx1-ubyte");
  IdxArray im = read_idx_u8(ipath, 3);
  IdxArray lb = read_idx_u8(lpath, 1);
  if (im.dims[1] != 28 || im.dims[2] != 28)
    throw UsageError(ipath + ": images are " + std::to_string(im.dims[1]) + "x" + std::to_string(im.dims[2]) +
                     ", Fashion-MNIST images are 28x28");
  if (im.dims[0] != lb.dims[0])
    throw UsageError(lpath + ": " + std::to_string(lb.dims[0]) + " labels but " + ipath + " has " +
                     std::to_string(im.dims[0]) + " images");
  Split s;
  s.images = std::move(im.data);
  s.labels.reserve(lb.data.size());
  for (size_t i = 0; i < lb.data.size(); ++i) {
    if (lb.data[i] >= 10)
      throw UsageError(lpath + ": label " + std::to_string(i) + " = " + std::to_string(lb.data[i]) + ", outside [0, 10)");
    s.labels.push_back(lb.data[i]);
  }
  return s;
}

std::string cifar_dir(const std::string& input) {
  if (fs::exists(fs::path(input) / "data_batch_1.bin")) return input;
  fs::path sub = fs::path(input) / "cifar-10-batches-bin";
  if (fs::exists(sub / "data_batch_1.bin")) return sub.string();
  throw UsageError((fs::path(input) / "data_batch_1.bin").string() +
                   ": input file not found (CIFAR-10 binary version: data_batch_1..5.bin, test_batch.bin)");
}

}  // namespace

PrepareResult prepare_dataset(const PrepareOptions& opt) {
  if (opt.shards < 1) throw UsageError("--shards " + std::to_string(opt.shards) + ": must be >= 1");
  if (opt.test_shards < 1) throw UsageError("--test-shards " + std::to_string(opt.test_shards) + ": must be >= 1");
  if (opt.gzip < 0 || opt.gzip > 9) throw UsageError("--gzip " + std::to_string(opt.gzip) + ": must be in [0, 9]");
  if (!fs::is_directory(opt.input)) throw UsageError(opt.input + ": --input directory does not exist");
  Split train, test;
  DatasetInfo info;
  if (opt.format == "fashion-mnist") {
    train = read_fmnist_split(opt.input, "train");
    test = read_fmnist_split(opt.input, "t10k");
    info.height = info.width = 28;
    info.channels = 1;
    info.num_classes = 10;
    info.class_names = fashion_mnist_classes();
    info.source = "Fashion-MNIST (Xiao, Rasul, Vollgraf 2017), IDX files from " + opt.input;
  } else if (opt.format == "cifar10") {
    std::string dir = cifar_dir(opt.input);
    for (int b = 1; b <= 5; ++b)
      read_cifar10_batch((fs::path(dir) / ("data_batch_" + std::to_string(b) + ".bin")).string(), train.images, train.labels);
    read_cifar10_batch((fs::path(dir) / "test_batch.bin").string(), test.images, test.labels);
    info.height = info.width = kCifarSide;
    info.channels = kCifarChannels;
    info.num_classes = kCifarClasses;
    info.class_names = cifar10_classes();
    info.source = "CIFAR-10 binary version (Krizhevsky 2009) from " + dir;
  } else {
    throw UsageError("--format '" + opt.format + "': expected fashion-mnist, cifar10 or imagefolder");
  }
  channel_mean_std(train.images, info.channels, info.mean, info.std);
  PrepareResult res;
  res.train_samples = static_cast<int64_t>(train.labels.size());
  res.test_samples = static_cast<int64_t>(test.labels.size());
  res.mean = info.mean;
  res.std = info.std;
  auto a = write_sharded_split(opt.output, "train", info, train.images, train.labels, opt.shards, opt.gzip);
  auto b = write_sharded_split(opt.output, "test", info, test.images, test.labels, opt.test_shards, opt.gzip);
  res.files = a;
  res.files.insert(res.files.end(), b.begin(), b.end());
  return res;
}

}  // namespace ht
