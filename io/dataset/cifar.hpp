#pragma once
// The CIFAR-10 binary version (https://www.cs.toronto.edu/~kriz/cifar.html): data_batch_1..5.bin and
// test_batch.bin, each a sequence of 3073-byte records: 1 label byte (0..9) then 3072 image bytes,
// channel-major (1024 R, 1024 G, 1024 B; each 32x32 row-major).
#include <cstdint>
#include <string>
#include <vector>

namespace ht {

constexpr int kCifarSide = 32, kCifarChannels = 3, kCifarClasses = 10;
constexpr int64_t kCifarRecord = 1 + kCifarSide * kCifarSide * kCifarChannels;

/// Appends the records of one batch file: images converted to NHWC (32x32x3), labels as int32.
/// Throws UsageError naming the file for a size that is not a positive multiple of 3073 bytes or a
/// label >= 10 (with its record number).
void read_cifar10_batch(const std::string& path, std::vector<uint8_t>& images_nhwc, std::vector<int32_t>& labels);

}  // namespace ht
