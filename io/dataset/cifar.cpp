// CIFAR-10 binary reader: CHW records to NHWC.
#include "io/dataset/cifar.hpp"

#include <cstdio>
#include <memory>

#include "base/error.hpp"

namespace ht {

void read_cifar10_batch(const std::string& path, std::vector<uint8_t>& images, std::vector<int32_t>& labels) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
  if (!f) throw UsageError(path + ": cannot open CIFAR-10 batch file");
  std::vector<uint8_t> buf;
  uint8_t tmp[1 << 16];
  size_t r;
  while ((r = std::fread(tmp, 1, sizeof tmp, f.get())) > 0) buf.insert(buf.end(), tmp, tmp + r);
  if (std::ferror(f.get())) throw UsageError(path + ": read error");
  if (buf.empty() || buf.size() % kCifarRecord != 0)
    throw UsageError(path + ": size " + std::to_string(buf.size()) + " bytes is not a positive multiple of the " +
                     std::to_string(kCifarRecord) + "-byte CIFAR-10 record (truncated or not CIFAR-10 binary)");
  const int64_t n = static_cast<int64_t>(buf.size()) / kCifarRecord;
  const int plane = kCifarSide * kCifarSide;
  size_t base = images.size();
  images.resize(base + static_cast<size_t>(n) * plane * kCifarChannels);
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* rec = buf.data() + i * kCifarRecord;
    if (rec[0] >= kCifarClasses)
      throw UsageError(path + ": record " + std::to_string(i) + " has label " + std::to_string(rec[0]) +
                       ", outside [0, 10)");
    labels.push_back(rec[0]);
    uint8_t* dst = images.data() + base + static_cast<size_t>(i) * plane * kCifarChannels;
    for (int c = 0; c < kCifarChannels; ++c)
      for (int p = 0; p < plane; ++p) dst[p * kCifarChannels + c] = rec[1 + c * plane + p];
  }
}

}  // namespace ht
