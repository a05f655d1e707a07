// Generated datasets: deterministic synthetic data and an in-memory dataset (tests, converters).
#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "io/dataset/augment.hpp"
#include "io/dataset/dataset.hpp"
#include "io/dataset/dataset_h5.hpp"

namespace ht {

void Dataset::read_window(int64_t, const std::function<CropBox(int, int)>&, int, int, Image8&, CropBox&, int32_t&) {
  throw std::logic_error("Dataset::read_window: only encoded datasets store image files");
}

namespace {

void check_read_args(const DatasetInfo& info, std::span<const int64_t> indices, std::span<uint8_t> images,
                     std::span<int32_t> labels) {
  size_t sample = static_cast<size_t>(info.height) * info.width * info.channels;
  if (images.size() != indices.size() * sample || labels.size() != indices.size())
    throw UsageError("Dataset::read: buffers of " + std::to_string(images.size()) + " bytes / " +
                     std::to_string(labels.size()) + " labels for " + std::to_string(indices.size()) + " samples");
  for (int64_t i : indices)
    if (i < 0 || i >= info.num_samples)
      throw UsageError("Dataset::read: sample index " + std::to_string(i) + " outside [0, " +
                       std::to_string(info.num_samples) + ")");
}

class SyntheticDataset final : public Dataset {
 public:
  SyntheticDataset(int64_t n, int h, int w, int c, int classes, uint64_t seed, const std::string& split)
      : seed_(seed), split_key_(hash_key(kStreamSynthetic, split == "train" ? 1 : split == "test" ? 2 : 3)) {
    if (n < 0 || h < 1 || w < 1 || c < 1 || classes < 1)
      throw UsageError("synthetic dataset: invalid shape n=" + std::to_string(n) + " " + std::to_string(h) + "x" +
                       std::to_string(w) + "x" + std::to_string(c) + " classes=" + std::to_string(classes));
    info_.num_samples = n;
    info_.height = h;
    info_.width = w;
    info_.channels = c;
    info_.num_classes = classes;
    for (int k = 0; k < classes; ++k) info_.class_names.push_back("class" + std::to_string(k));
    info_.source = "synthetic(seed=" + std::to_string(seed) + ", split=" + split + ")";
    // Statistics of the generating distribution (train split of the same seed), as prepare does.
    const int64_t m = 256;
    std::vector<uint8_t> img(static_cast<size_t>(m) * h * w * c);
    for (int64_t i = 0; i < m; ++i) sample(hash_key(kStreamSynthetic, 1), i, img.data() + static_cast<size_t>(i) * h * w * c, nullptr);
    channel_mean_std(img, c, info_.mean, info_.std);
    for (auto& s : info_.std) s = std::max(s, 1e-3f);
  }
  const DatasetInfo& info() const override { return info_; }
  void read(std::span<const int64_t> indices, std::span<uint8_t> images, std::span<int32_t> labels) override {
    check_read_args(info_, indices, images, labels);
    size_t sz = static_cast<size_t>(info_.height) * info_.width * info_.channels;
    for (size_t i = 0; i < indices.size(); ++i) sample(split_key_, indices[i], images.data() + i * sz, &labels[i]);
  }

 private:
  // Label: hash of (seed, split, i). Pixel p: a class template value in [48, 208) (hash of seed,
  // class, p; shared by the splits) plus noise in [-48, 48) (hash of seed, split, i, p).
  void sample(uint64_t split_key, int64_t i, uint8_t* px, int32_t* label) const {
    uint64_t hs = hash_key(seed_, split_key, static_cast<uint64_t>(i));
    int32_t y = static_cast<int32_t>(uniform_below(hs, static_cast<uint64_t>(info_.num_classes)));
    if (label) *label = y;
    int64_t np = static_cast<int64_t>(info_.height) * info_.width * info_.channels;
    uint64_t tk = hash_key(seed_, kStreamSynthetic, 0x7E4D, static_cast<uint64_t>(y));
    for (int64_t p = 0; p < np; ++p) {
      int t = 48 + static_cast<int>(splitmix64(tk ^ static_cast<uint64_t>(p)) % 160);
      int noise = static_cast<int>(splitmix64(hs ^ (static_cast<uint64_t>(p) * 0x9E3779B97F4A7C15ull)) % 96) - 48;
      px[p] = static_cast<uint8_t>(std::clamp(t + noise, 0, 255));
    }
  }
  uint64_t seed_, split_key_;
  DatasetInfo info_;
};

class MemoryDataset final : public Dataset {
 public:
  MemoryDataset(DatasetInfo info, std::vector<uint8_t> images, std::vector<int32_t> labels)
      : info_(std::move(info)), images_(std::move(images)), labels_(std::move(labels)) {
    info_.num_samples = static_cast<int64_t>(labels_.size());
    sample_ = static_cast<size_t>(info_.height) * info_.width * info_.channels;
    if (images_.size() != labels_.size() * sample_)
      throw UsageError("memory dataset: " + std::to_string(images_.size()) + " image bytes for " +
                       std::to_string(labels_.size()) + " labels");
    if (info_.mean.empty()) info_.mean.assign(static_cast<size_t>(info_.channels), 0.f);
    if (info_.std.empty()) info_.std.assign(static_cast<size_t>(info_.channels), 1.f);
  }
  const DatasetInfo& info() const override { return info_; }
  void read(std::span<const int64_t> indices, std::span<uint8_t> images, std::span<int32_t> labels) override {
    check_read_args(info_, indices, images, labels);
    for (size_t i = 0; i < indices.size(); ++i) {
      std::memcpy(images.data() + i * sample_, images_.data() + static_cast<size_t>(indices[i]) * sample_, sample_);
      labels[i] = labels_[static_cast<size_t>(indices[i])];
    }
  }

 private:
  DatasetInfo info_;
  std::vector<uint8_t> images_;
  std::vector<int32_t> labels_;
  size_t sample_ = 0;
};

}  // namespace

std::shared_ptr<Dataset> make_synthetic_dataset(int64_t n, int h, int w, int c, int classes, uint64_t seed,
                                                const std::string& split) {
  return std::make_shared<SyntheticDataset>(n, h, w, c, classes, seed, split);
}

std::shared_ptr<Dataset> make_memory_dataset(DatasetInfo info, std::vector<uint8_t> images,
                                             std::vector<int32_t> labels) {
  return std::make_shared<MemoryDataset>(std::move(info), std::move(images), std::move(labels));
}

}  // namespace ht
