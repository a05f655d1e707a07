#pragma once
// Datasets: the HDF5 shard schema of docs/dataset.md, the sharded reader with its
// validation, generated (synthetic) data, and the DataLoader that applies the sampling rule
// (docs/dataset.md "What every rank reads"), augmentation (io/dataset/augment.hpp) and normalisation.
//
// Shard files: DIR/<split>-<k:05>-of-<S:05>.h5, each with uint8 /images [N,H,W,C] (NHWC, chunked by
// whole samples), int32 /labels [N] and the root attributes format, version, split, shard_index,
// num_shards, num_classes, height, width, channels, class_names, mean, std, source. Encoded shards
// (root attribute storage = "encoded") hold uint8 /encoded [B] and int64 /offsets [N+1] instead of
// /images: sample i is the image file in bytes [offsets[i], offsets[i+1]).
// Global sample index i runs over the shards in shard order (shard 0's samples first).
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/tensor.hpp"
#include "io/dataset/image_decode.hpp"

namespace ht {

struct DatasetInfo {
  int64_t num_samples = 0;
  int height = 0, width = 0, channels = 0, num_classes = 0;
  std::vector<std::string> class_names;
  std::vector<float> mean, std;  ///< per channel, of pixel values scaled to [0,1], on the train split
  std::string source;
  /// Samples stored as the image files' bytes (root attribute storage = "encoded": /encoded and
  /// /offsets instead of /images), decoded by read() to height x width x channels as `prepare` would
  /// have stored them raw, or a window of the whole file by read_window() (docs/dataset.md "Your own images").
  bool encoded = false;
  /// Shards of the split in schema version 1 (HDF5's original format, no metadata checksums): read,
  /// but worth rewriting with `hpctrain prepare` (docs/dataset.md). Not part of the schema comparison.
  std::vector<std::string> version1_shards;
  /// The split's first shard (the one its schema was read from); empty for generated data.
  std::string first_shard;
};

/// A split of samples in NHWC uint8 with int32 labels.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual const DatasetInfo& info() const = 0;
  /// Reads samples at the given global indices into images (count*H*W*C bytes, NHWC) and labels
  /// (count). Thread-safe. Throws UsageError for an index outside [0, num_samples), RuntimeError
  /// when the file cannot be read.
  virtual void read(std::span<const int64_t> indices, std::span<uint8_t> images, std::span<int32_t> labels) = 0;
  /// Encoded datasets only: sample `index`'s label, and the window `pick(height, width)` of its stored
  /// image file at full size (not resized to the split's H x W), decoded by decode_image_window
  /// (io/dataset/image_decode.hpp: only about the window, at a DCT scale keeping it >= min_w x min_h)
  /// into `decoded`, the window's place in it in `window`. Thread-safe. Throws UsageError for an index
  /// outside [0, num_samples), RuntimeError naming the file and sample when it cannot be read or
  /// decoded, std::logic_error for a raw dataset.
  virtual void read_window(int64_t index, const std::function<CropBox(int height, int width)>& pick, int min_w,
                           int min_h, Image8& decoded, CropBox& window, int32_t& label);
};

/// Opens and validates every shard of `split` ("train"/"test") in dir; throws UsageError naming file,
/// dataset, shape or value (row and value for bad labels). Checks: shard set complete and consistently
/// named, each file a readable HDF5 file (schema version 1, or 2 in HDF5's checksummed format with
/// fixed-length strings only), /images uint8 rank 4, /labels int32 rank 1 of the same length, both
/// stored inside the file with every chunk written and no unexpected filter, attributes present and
/// consistent with the data and file name (finite mean/std), identical H/W/C,
/// num_classes, class_names, mean and std across shards, every label in [0, num_classes).
/// Reads go through the HDF5 C API under hdf5_mutex() (io/h5.hpp) or pread(); file handles stay open
/// for the object's life.
std::shared_ptr<Dataset> open_sharded_dataset(const std::string& dir, const std::string& split);

/// Throws UsageError naming a shard of each split when the test split's schema (H/W/C, num_classes,
/// class_names, mean, std) differs from the train split's: the statistics are the train split's, and
/// the same in every shard, test shards included (docs/dataset.md). No-op for generated data.
void check_splits_agree(const DatasetInfo& train, const DatasetInfo& test);

/// Opens and validates one shard file on its own (the per-file checks of open_sharded_dataset).
std::shared_ptr<Dataset> open_dataset_shard(const std::string& path);

/// Deterministic generated data (for data.synthetic and benchmarks): sample i's label is a hash of
/// (seed, split, i) and its pixels a class template (a hash of (seed, class, pixel), shared by the
/// splits so a model can learn it) plus per-sample noise (a hash of (seed, split, i, pixel)).
/// mean/std are those of the generating distribution's first 256 train samples.
std::shared_ptr<Dataset> make_synthetic_dataset(int64_t n, int h, int w, int c, int classes, uint64_t seed,
                                                const std::string& split);

/// An in-memory dataset over the given NHWC bytes and labels (tests, converters).
std::shared_ptr<Dataset> make_memory_dataset(DatasetInfo info, std::vector<uint8_t> images,
                                             std::vector<int32_t> labels);

enum class Layout { NCHW, NHWC };

struct LoaderOptions {
  int64_t global_batch = 128;
  int rank = 0, world_size = 1;
  uint64_t seed = 42;
  /// train: shuffled per epoch per the docs/dataset.md sampling rule, drop_last; eval: every sample exactly
  /// once across ranks, contiguous per rank, no augmentation, last batch may be short.
  bool train = true;
  int crop_padding = 0;  ///< random crop with zero padding; offset in [0, 2*crop_padding] (train only)
  bool flip = false;     ///< random horizontal flip with p = 0.5 (train only)
  /// > 0: batches hold crop_size x crop_size images. Train with `resized_crop`: torchvision's
  /// RandomResizedCrop(crop_size, scale = (resized_crop_min_scale, 1), ratio = (3/4, 4/3)), the box
  /// from resized_crop_box (io/dataset/augment.hpp), resized with PIL's bilinear filter
  /// (io/dataset/resample.hpp); otherwise (and always for eval) the centre crop_size window, which for
  /// images stored at the shorter side S is torchvision's Resize(S) + CenterCrop(crop_size). On
  /// encoded datasets the resized crop's box is drawn over the stored file's whole image and only
  /// that window is decoded (Dataset::read_window).
  /// crop_padding applies after the centre crop; it is not combined with resized_crop.
  int crop_size = 0;
  bool resized_crop = false;
  double resized_crop_min_scale = 0.08;
  int threads = 1;       ///< threads that crop, resize, flip and normalise the samples of a batch
  Layout layout = Layout::NCHW;
  bool prefetch = true;  ///< prepare the next batch on a background thread
  int64_t eval_batch = 256;
  int64_t limit = 0;  ///< use only the first N samples when > 0
};

struct Batch {
  Tensor images;  ///< f32 [n,C,H,W] or [n,H,W,C] (H = W = crop_size when set), (pixel/255 - mean[c]) / std[c]
  Tensor labels;  ///< i32 [n]
  int64_t step = 0;
  int epoch = 0;
  std::vector<int64_t> indices;  ///< global sample indices, for tests
};

/// Serves this rank's batches. Train mode: epoch e uses epoch_permutation(N, seed, e); global step s
/// takes permutation positions [s*B, (s+1)*B) (B = global_batch) and rank r its contiguous part
/// [s*B + r*B/W, s*B + (r+1)*B/W). The last N mod B samples of each epoch's permutation are dropped.
/// Eval mode: rank r takes samples [floor(r*N/W), floor((r+1)*N/W)) in order, in batches of
/// eval_batch; ranks may have different batch counts (differ by at most one).
class DataLoader {
 public:
  /// Throws UsageError when world_size does not divide global_batch (train), when global_batch/
  /// world_size is 0, when rank/world_size are out of range, or when crop_size exceeds the images
  /// (without resized_crop), resized_crop comes without crop_size or with crop_padding, or threads < 1.
  DataLoader(std::shared_ptr<Dataset> dataset, LoaderOptions options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  /// Train: floor(N / global_batch) (remainder dropped); eval: this rank's batch count.
  int64_t steps_per_epoch() const;
  /// Starts epoch `epoch` at step first_step (> 0 resumes mid-epoch, e.g. from a checkpoint).
  void start_epoch(int epoch, int64_t first_step = 0);
  /// Fills `out` with the next batch; false at the end of the epoch.
  bool next(Batch& out);
  /// Samples used (limit applied).
  int64_t num_samples() const { return n_; }
  /// Height and width of the images in a batch.
  int out_height() const { return opt_.crop_size > 0 ? opt_.crop_size : ds_->info().height; }
  int out_width() const { return opt_.crop_size > 0 ? opt_.crop_size : ds_->info().width; }
  const DatasetInfo& info() const { return ds_->info(); }
  /// Global indices of this rank's batch at step `step` of `epoch` (what next() would return).
  std::vector<int64_t> batch_indices(int epoch, int64_t step) const;

 private:
  void produce(int epoch, int64_t step, Batch& out) const;
  void launch(int64_t step);
  struct Prefetch;
  std::shared_ptr<Dataset> ds_;
  LoaderOptions opt_;
  int64_t n_ = 0;
  int epoch_ = 0;
  int64_t step_ = 0;
  std::vector<int64_t> perm_;
  std::unique_ptr<Prefetch> pf_;
};

/// The epoch permutation of [0,n) from (seed, epoch) — same on every rank and every world_size.
/// Fisher-Yates driven by the counter-based hash of io/dataset/augment.hpp, so it is platform-independent.
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int epoch);
/// Positions [begin, end) of the epoch permutation that rank `rank` takes at global step `step`:
/// [s*B + r*B/W, s*B + (r+1)*B/W). Requires W | B.
std::pair<int64_t, int64_t> train_positions(int64_t step, int64_t global_batch, int rank, int world_size);
/// Samples [begin, end) that rank `rank` evaluates: [floor(r*n/W), floor((r+1)*n/W)).
std::pair<int64_t, int64_t> eval_range(int64_t n, int rank, int world_size);

}  // namespace ht
