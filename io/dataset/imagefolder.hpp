#pragma once
// A folder of class folders of images (torchvision's ImageFolder layout) to the shard schema of
// docs/dataset.md: finding the files as ImageFolder does, the seeded validation split, the shard
// plan, and converting one shard's files (decode, resize, centre crop) on worker threads. The MPI
// side (which rank converts which shard, agreeing, finishing) is src/cli/prepare_imagefolder.cpp.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "io/dataset/dataset_h5.hpp"
#include "io/dataset/image_decode.hpp"

namespace ht {

/// One input file: its path, its path relative to the input folder (as listed in reports), its label.
struct ImageFile {
  std::string path, rel;
  int32_t label = 0;
};

/// What `prepare --format imagefolder` found in its input folder.
struct ImageFolderPlan {
  std::vector<std::string> classes;  ///< label order: sorted subfolder names (byte order = Python's)
  std::vector<ImageFile> train, test;
  std::string layout;  ///< "DIR/train and DIR/val" or "DIR, val_fraction 0.1, seed 42"
};

/// Extensions torchvision's ImageFolder accepts (lower-cased comparison). Files with others are not
/// samples (a README, a .DS_Store) and are not reported.
bool has_image_extension(const std::string& name);

/// The classes and samples of one ImageFolder root, in ImageFolder's order: classes are the sorted
/// names of the subfolders (symbolic links followed); each class's files are found by walking its
/// folder (links followed, a link loop visited once), folders in sorted path order and files sorted
/// within each. Throws UsageError naming the folder when `root` has no class folders or a class folder
/// has no file with an image extension.
std::vector<ImageFile> scan_image_folder(const std::string& root, std::vector<std::string>& classes);

/// The plan for `input`: DIR/train and DIR/val when DIR/train exists (val_fraction must then be 0;
/// both must have the same class folders), else DIR itself split per class with a seeded
/// permutation: round(val_fraction * n) of each class's n files to the test split (at least one file
/// stays in train), each split keeping ImageFolder's order. Throws UsageError naming the folder or value.
ImageFolderPlan plan_image_folder(const std::string& input, double val_fraction, uint64_t seed);

/// Conversion settings of one prepare run.
struct ImageConvertOptions {
  int size = 256;      ///< stored images are size x size (shorter side resized, centre crop)
  int channels = 3;    ///< 3 = RGB, 1 = gray
  int threads = 1;     ///< decoding threads of this rank
  bool encoded = false;  ///< keep each file's bytes (the loader decodes them) instead of raw pixels
  int max_side = 0;      ///< encoded: files whose longer side exceeds it are stored re-encoded (JPEG q90) at it; 0: originals
  int64_t max_file_bytes = int64_t{1} << 30;
  ImageLimits limits;
};

/// The converted samples of one shard (its files in order, the bad ones left out).
struct ConvertedShard {
  std::vector<uint8_t> images;  ///< kept x size x size x channels, NHWC (raw storage)
  EncodedSamples encoded;       ///< the kept files' bytes (encoded storage)
  std::vector<int32_t> labels;
  std::vector<std::string> kept;  ///< rel of each kept sample
  std::vector<std::pair<std::string, std::string>> skipped;  ///< rel, reason
  /// Per channel, of the stored pixel values (0..255) over the kept samples: integers, so the
  /// statistics of a split do not depend on how it was cut into shards or ranks.
  std::vector<uint64_t> sum, sum_sq;
};

/// Reads, decodes, resizes and crops `files` on opt.threads threads. A file that cannot be read or
/// decoded is skipped with its reason (never an exception); the order of the kept samples is the
/// order of `files`, whatever the threads do. Encoded: the statistics are those of the stored bytes
/// decoded as the loader will decode them (re-encoded files included).
ConvertedShard convert_image_files(std::span<const ImageFile> files, const ImageConvertOptions& opt);

}  // namespace ht
