#pragma once
// `hpctrain prepare --format imagefolder`: a folder of class folders of JPEG/PNG files to sharded
// HDF5 (docs/dataset.md "Your own images"), by every rank of the job, resumable.
#include <cstdint>
#include <string>

namespace ht {

struct ImageFolderPrepareOptions {
  std::string input, output;
  int size = 256;            ///< stored side: shorter side resized to it, centre crop
  int channels = 3;          ///< 3 (RGB) or 1 (gray)
  double val_fraction = 0;   ///< 0: DIR/train and DIR/val; else the seeded split of DIR
  int64_t seed = 42;         ///< of the validation split
  int shards = 0;            ///< train shards; 0: about kImagesPerShard images each
  int test_shards = 0;       ///< test shards; 0: as for train
  int threads = 0;           ///< decoding threads per rank; 0: this host's cores / ranks on it
  int gzip = 0;
  std::string storage = "raw";  ///< "raw" (pixels) or "encoded" (the files' bytes, decoded by the loader)
  int max_side = 0;             ///< encoded: longer sides above it are re-encoded (JPEG q90) at it; 0: originals
  int64_t max_pixels = 100'000'000;
  bool strict = false;       ///< a bad file is an error (exit 2) instead of skipped and listed
};

/// Images per shard when --shards is not given: 1024 images of 256 x 256 x 3 are 200 MB.
constexpr int64_t kImagesPerShard = 1024;

/// Runs the conversion on every rank of the job (each converts the shards k with k % world_size ==
/// rank, on opt.threads threads), then writes, from rank 0, classes.txt, samples-{train,test}.tsv,
/// skipped.tsv and manifest.json beside the shards. A rerun with the same input and options resumes
/// (shards already converted are kept); after a finished run it does nothing. Throws UsageError
/// (every rank together) for bad options, an input folder that is not a class folder layout, or with
/// `strict` the first bad file; RuntimeError for I/O failures.
void prepare_image_folder(const ImageFolderPrepareOptions& opt);

}  // namespace ht
