// DataLoader: the sampling rule of docs/dataset.md (epoch_permutation, train_positions, eval_range),
// augmentation (io/dataset/augment.hpp), normalisation and layout conversion, with the next batch
// prepared on a background thread.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>
#include <numeric>
#include <thread>
#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "io/dataset/augment.hpp"
#include "io/dataset/dataset.hpp"
#include "io/dataset/resample.hpp"

namespace ht {

namespace {
// CPU form of augment_image (io/dataset/augment.hpp) working a row at a time: the crop is a shift, so each
// output row is a zero-filled copy of one source row segment (mirrored when flipping). The tests
// check it against the reference implementation.
void augment_image_rows(const uint8_t* src, uint8_t* dst, int H, int W, int C, AugParams p, int pad) {
  const size_t row = static_cast<size_t>(W) * C;
  for (int y = 0; y < H; ++y) {
    uint8_t* d = dst + static_cast<size_t>(y) * row;
    const int sy = y + p.oy - pad;
    if (sy < 0 || sy >= H) {
      std::memset(d, 0, row);
      continue;
    }
    const uint8_t* s = src + static_cast<size_t>(sy) * row;
    const int shift = p.ox - pad;  // cropped(x) = in(x + shift)
    const int x0 = std::max(0, -shift), x1 = std::min(W, W - shift);  // cropped x with a source pixel
    if (!p.flip) {
      std::memset(d, 0, row);
      if (x1 > x0) std::memcpy(d + static_cast<size_t>(x0) * C, s + static_cast<size_t>(x0 + shift) * C, static_cast<size_t>(x1 - x0) * C);
    } else {
      for (int x = 0; x < W; ++x) {  // out(x) = cropped(W-1-x)
        const int xc = W - 1 - x;
        uint8_t* o = d + static_cast<size_t>(x) * C;
        if (xc < x0 || xc >= x1) std::memset(o, 0, static_cast<size_t>(C));
        else std::memcpy(o, s + static_cast<size_t>(xc + shift) * C, static_cast<size_t>(C));
      }
    }
  }
}
}  // namespace

namespace {

// n floats to dst through non-temporal stores where the CPU has them (x86-64's SSE2): a batch is tens
// of MB that the step reads much later, so writing it through the cache costs a read of every line
// first and evicts the working set. Elsewhere a plain copy.
void stream_floats(float* dst, const float* src, int n) {
  int i = 0;
#if defined(__SSE2__)
  for (; i < n && (reinterpret_cast<uintptr_t>(dst + i) & 15) != 0; ++i) dst[i] = src[i];
  for (; i + 4 <= n; i += 4) _mm_stream_ps(dst + i, _mm_loadu_ps(src + i));
#endif
  for (; i < n; ++i) dst[i] = src[i];
}

// Non-temporal stores are not ordered with later ones: fenced before the batch is handed over.
void stream_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

}  // namespace

// ---- The sampling rule of docs/dataset.md: which sample goes to which rank at which step ----

std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int epoch) {
  std::vector<int64_t> p(static_cast<size_t>(n < 0 ? 0 : n));
  std::iota(p.begin(), p.end(), int64_t{0});
  // Fisher-Yates from the back; swap partner of position i drawn from hash(seed, epoch, i).
  uint64_t key = hash_key(seed, kStreamPermutation, static_cast<uint64_t>(static_cast<int64_t>(epoch)));
  for (int64_t i = n - 1; i > 0; --i) {
    uint64_t j = uniform_below(splitmix64(key ^ static_cast<uint64_t>(i)), static_cast<uint64_t>(i + 1));
    std::swap(p[static_cast<size_t>(i)], p[static_cast<size_t>(j)]);
  }
  return p;
}

std::pair<int64_t, int64_t> train_positions(int64_t step, int64_t global_batch, int rank, int world_size) {
  int64_t b = global_batch / world_size;
  int64_t begin = step * global_batch + rank * b;
  return {begin, begin + b};
}

std::pair<int64_t, int64_t> eval_range(int64_t n, int rank, int world_size) {
  return {n * rank / world_size, n * (rank + 1) / world_size};
}

// ---- The loader ----

// One worker thread that produces exactly one requested batch at a time.
struct DataLoader::Prefetch {
  std::thread thread;
  std::mutex m;
  std::condition_variable cv;
  bool pending = false, ready = false, stop = false;
  int epoch = 0;
  int64_t step = -1;
  Batch result;
  Batch spare;  // the caller's previous batch: produce() refills its buffers when nobody else holds them
  std::exception_ptr error;
};

DataLoader::DataLoader(std::shared_ptr<Dataset> dataset, LoaderOptions options)
    : ds_(std::move(dataset)), opt_(std::move(options)) {
  if (!ds_) throw UsageError("DataLoader: no dataset");
  if (opt_.world_size < 1 || opt_.rank < 0 || opt_.rank >= opt_.world_size)
    throw UsageError("DataLoader: rank " + std::to_string(opt_.rank) + " outside world_size " +
                     std::to_string(opt_.world_size));
  if (opt_.train) {
    if (opt_.global_batch < 1 || opt_.global_batch % opt_.world_size != 0)
      throw UsageError("train.global_batch = " + std::to_string(opt_.global_batch) +
                       " must be a positive multiple of world_size = " + std::to_string(opt_.world_size));
  } else if (opt_.eval_batch < 1) {
    throw UsageError("train.eval_batch = " + std::to_string(opt_.eval_batch) + " must be >= 1");
  }
  if (opt_.crop_padding < 0) throw UsageError("data.crop_padding = " + std::to_string(opt_.crop_padding) + " must be >= 0");
  const DatasetInfo& info = ds_->info();
  if (opt_.threads < 1) throw UsageError("data.loader_threads = " + std::to_string(opt_.threads) + " must be >= 1");
  if (opt_.crop_size < 0) throw UsageError("data.crop_size = " + std::to_string(opt_.crop_size) + " must be >= 0");
  if (opt_.resized_crop && opt_.train) {
    if (opt_.crop_size == 0) throw UsageError("data.random_resized_crop = true needs data.crop_size (the side it resizes to)");
    if (opt_.crop_padding > 0)
      throw UsageError("data.random_resized_crop = true and data.crop_padding = " + std::to_string(opt_.crop_padding) +
                       ": choose one random crop (set data.crop_padding = 0)");
    if (!(opt_.resized_crop_min_scale > 0 && opt_.resized_crop_min_scale <= 1))
      throw UsageError("data.random_resized_crop_min_scale = " + std::to_string(opt_.resized_crop_min_scale) +
                       " must be in (0, 1]");
  } else if (opt_.crop_size > 0 && (opt_.crop_size > info.height || opt_.crop_size > info.width)) {
    throw UsageError("data.crop_size = " + std::to_string(opt_.crop_size) + ": larger than the " + std::to_string(info.height) +
                     "x" + std::to_string(info.width) + " images of " + (info.first_shard.empty() ? info.source : info.first_shard));
  }
  n_ = info.num_samples;
  if (opt_.limit > 0) n_ = std::min(n_, opt_.limit);
  if (static_cast<int>(info.mean.size()) != info.channels || static_cast<int>(info.std.size()) != info.channels)
    throw UsageError("dataset " + info.source + ": mean/std have " + std::to_string(info.mean.size()) +
                     " entries for " + std::to_string(info.channels) + " channels");
  if (opt_.prefetch) {
    pf_ = std::make_unique<Prefetch>();
    Prefetch* p = pf_.get();
    p->thread = std::thread([this, p] {
      std::unique_lock<std::mutex> lk(p->m);
      for (;;) {
        p->cv.wait(lk, [p] { return p->stop || p->pending; });
        if (p->stop) return;
        int e = p->epoch;
        int64_t s = p->step;
        Batch b = std::move(p->spare);
        lk.unlock();
        std::exception_ptr err;
        try {
          produce(e, s, b);
        } catch (...) {
          err = std::current_exception();
        }
        lk.lock();
        p->result = std::move(b);
        p->error = err;
        p->pending = false;
        p->ready = true;
        p->cv.notify_all();
      }
    });
  }
  start_epoch(0, 0);
}

DataLoader::~DataLoader() {
  if (pf_) {
    {
      std::lock_guard<std::mutex> lk(pf_->m);
      pf_->stop = true;
    }
    pf_->cv.notify_all();
    pf_->thread.join();
  }
}

int64_t DataLoader::steps_per_epoch() const {
  if (opt_.train) return n_ / opt_.global_batch;
  auto [b, e] = eval_range(n_, opt_.rank, opt_.world_size);
  return (e - b + opt_.eval_batch - 1) / opt_.eval_batch;
}

void DataLoader::start_epoch(int epoch, int64_t first_step) {
  if (first_step < 0) throw UsageError("DataLoader::start_epoch: first_step " + std::to_string(first_step) + " < 0");
  if (pf_) {  // the worker reads perm_: let an outstanding batch finish and drop it
    std::unique_lock<std::mutex> lk(pf_->m);
    pf_->cv.wait(lk, [this] { return !pf_->pending; });
    pf_->ready = false;
    pf_->step = -1;
  }
  epoch_ = epoch;
  step_ = first_step;
  if (opt_.train) perm_ = epoch_permutation(n_, opt_.seed, epoch);
  launch(step_);
}

void DataLoader::launch(int64_t step) {
  if (!pf_ || step >= steps_per_epoch()) return;
  std::unique_lock<std::mutex> lk(pf_->m);
  pf_->cv.wait(lk, [this] { return !pf_->pending; });
  pf_->epoch = epoch_;
  pf_->step = step;
  pf_->ready = false;
  pf_->pending = true;
  pf_->cv.notify_all();
}

std::vector<int64_t> DataLoader::batch_indices(int epoch, int64_t step) const {
  std::vector<int64_t> idx;
  if (step < 0 || step >= steps_per_epoch()) return idx;
  if (opt_.train) {
    std::vector<int64_t> other;
    const std::vector<int64_t>& perm = (epoch == epoch_ && !perm_.empty()) ? perm_ : (other = epoch_permutation(n_, opt_.seed, epoch));
    auto [b, e] = train_positions(step, opt_.global_batch, opt_.rank, opt_.world_size);
    idx.assign(perm.begin() + b, perm.begin() + e);
  } else {
    auto [b, e] = eval_range(n_, opt_.rank, opt_.world_size);
    int64_t s = b + step * opt_.eval_batch;
    for (int64_t i = s; i < std::min(e, s + opt_.eval_batch); ++i) idx.push_back(i);
  }
  return idx;
}

void DataLoader::produce(int epoch, int64_t step, Batch& out) const {
  const DatasetInfo& info = ds_->info();
  const int H = info.height, W = info.width, C = info.channels;
  const int Ho = out_height(), Wo = out_width();
  const size_t sample = static_cast<size_t>(H) * W * C, out_sample = static_cast<size_t>(Ho) * Wo * C;
  out.indices = batch_indices(epoch, step);
  out.step = step;
  out.epoch = epoch;
  const int64_t n = static_cast<int64_t>(out.indices.size());
  // Raw samples: one read for the batch (runs of neighbours become one read). Encoded samples: each
  // read (and decoded) by the thread that crops it, so decoding spreads over the threads.
  const bool per_sample = info.encoded;
  std::vector<uint8_t> raw(per_sample ? 0 : static_cast<size_t>(n) * sample);
  out.labels = Tensor::empty({n}, DType::i32);
  if (!per_sample) ds_->read(out.indices, raw, out.labels.span<int32_t>());
  // The previous batch's image buffer is refilled when this batch is the only holder of it and the
  // shape is the same: a fresh one of this size (tens of MB) comes from the kernel as zeroed pages,
  // which cost about as much as normalising into them.
  const std::vector<int64_t> shape = opt_.layout == Layout::NCHW ? std::vector<int64_t>{n, C, Ho, Wo}
                                                                 : std::vector<int64_t>{n, Ho, Wo, C};
  if (!out.images.sole_owner() || out.images.shape() != shape || out.images.dtype() != DType::f32 ||
      out.images.device() != Device::cpu)
    out.images = Tensor::empty(shape, DType::f32);
  float* dst = out.images.data<float>();
  // (v/255 - mean[c]) / std[c] for every byte value: one table lookup per element.
  std::vector<float> lut(static_cast<size_t>(C) * 256);
  for (int c = 0; c < C; ++c)
    for (int v = 0; v < 256; ++v)
      lut[static_cast<size_t>(c) * 256 + v] = normalize_pixel(static_cast<uint8_t>(v), info.mean[c], 1.0f / info.std[c]);
  const bool resized = opt_.train && opt_.resized_crop;
  const bool centre = !resized && opt_.crop_size > 0;
  const int pad = opt_.train ? opt_.crop_padding : 0;
  const bool shift_flip = opt_.train && (pad > 0 || (opt_.flip && !resized));
  // Sample i: crop (random resized, or centre), then crop-with-padding and flip, then normalise.
  auto one = [&](int64_t i, std::vector<uint8_t>& a, std::vector<uint8_t>& b, std::vector<uint8_t>& r, Image8& decoded,
                 std::vector<float>& line) {
    const int64_t index = out.indices[static_cast<size_t>(i)];
    const uint8_t* src = r.data();  // encoded: this sample alone, read here (raw is empty then)
    if (per_sample && resized) {
      // Encoded: the box is drawn over the stored file's whole image, as torchvision's recipe over
      // ImageFolder does, and only that window is decoded (docs/dataset.md "Your own images").
      auto pick = [&](int h, int w) { return resized_crop_box(opt_.seed, epoch, index, h, w, opt_.resized_crop_min_scale); };
      CropBox at;  // the window's place in `decoded`
      ds_->read_window(index, pick, Wo, Ho, decoded, at, out.labels.span<int32_t>()[static_cast<size_t>(i)]);
      resample_bilinear(decoded.pixels.data() + (static_cast<size_t>(at.y) * decoded.width + at.x) * C, decoded.width,
                        at.w, at.h, C, Wo, Ho, 0, 0, Wo, Ho, a.data());
    } else if (per_sample) {
      ds_->read(std::span<const int64_t>(&out.indices[static_cast<size_t>(i)], 1), r,
                out.labels.span<int32_t>().subspan(static_cast<size_t>(i), 1));
    } else {
      src = raw.data() + static_cast<size_t>(i) * sample;
    }
    if (resized) {
      if (!per_sample) {
        const CropBox box = resized_crop_box(opt_.seed, epoch, index, H, W, opt_.resized_crop_min_scale);
        resample_bilinear(src + (static_cast<size_t>(box.y) * W + box.x) * C, W, box.w, box.h, C, Wo, Ho, 0, 0, Wo, Ho,
                          a.data());
      }
      src = a.data();
    } else if (centre) {
      const CropBox box = center_crop_box(H, W, Ho, Wo);
      for (int y = 0; y < Ho; ++y)
        std::memcpy(a.data() + static_cast<size_t>(y) * Wo * C, src + (static_cast<size_t>(box.y + y) * W + box.x) * C,
                    static_cast<size_t>(Wo) * C);
      src = a.data();
    }
    if (shift_flip) {
      augment_image_rows(src, b.data(), Ho, Wo, C, aug_params(opt_.seed, epoch, index, pad, opt_.flip), pad);
      src = b.data();
    }
    // Normalised into the batch row by row; a random-resized-crop sample's flip is folded in here
    // (its columns read right to left), the other augmentations' flip was applied above.
    const bool mirror = resized && opt_.flip && aug_params(opt_.seed, epoch, index, 0, true).flip;
    float* d = dst + static_cast<size_t>(i) * out_sample;
    const bool nchw = opt_.layout == Layout::NCHW;
    for (int y = 0; y < Ho; ++y) {
      const uint8_t* row = src + static_cast<size_t>(y) * Wo * C;
      for (int c = 0; c < C; ++c) {
        const float* l = lut.data() + static_cast<size_t>(c) * 256;
        if (nchw) {  // a row of one channel in `line`, then streamed into the batch
          if (mirror)
            for (int x = 0; x < Wo; ++x) line[static_cast<size_t>(x)] = l[row[static_cast<size_t>(Wo - 1 - x) * C + c]];
          else
            for (int x = 0; x < Wo; ++x) line[static_cast<size_t>(x)] = l[row[static_cast<size_t>(x) * C + c]];
          stream_floats(d + (static_cast<size_t>(c) * Ho + y) * Wo, line.data(), Wo);
        } else {
          float* o = d + static_cast<size_t>(y) * Wo * C + c;
          for (int x = 0; x < Wo; ++x) o[static_cast<size_t>(x) * C] = l[row[static_cast<size_t>(mirror ? Wo - 1 - x : x) * C + c]];
        }
      }
    }
  };
  // Samples are independent (every random draw is a function of the sample's global index), so the
  // threads may take them in any order.
  std::atomic<int64_t> next{0};
  std::exception_ptr error;
  std::mutex error_m;
  auto work = [&] {
    std::vector<uint8_t> a(out_sample), b(out_sample), r(per_sample && !resized ? sample : 0);
    Image8 decoded;
    std::vector<float> line(static_cast<size_t>(Wo));
    try {
      for (int64_t i = next++; i < n; i = next++) one(i, a, b, r, decoded, line);
    } catch (...) {
      std::lock_guard<std::mutex> lk(error_m);
      error = std::current_exception();
    }
    stream_fence();
  };
  const int threads = static_cast<int>(std::min<int64_t>(opt_.threads, std::max<int64_t>(n, 1)));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

bool DataLoader::next(Batch& out) {
  if (step_ >= steps_per_epoch()) return false;
  bool got = false;
  if (pf_) {
    std::unique_lock<std::mutex> lk(pf_->m);
    if (pf_->step == step_ && pf_->epoch == epoch_ && (pf_->pending || pf_->ready)) {
      pf_->cv.wait(lk, [this] { return pf_->ready; });
      pf_->ready = false;
      if (pf_->error) {
        auto e = pf_->error;
        pf_->error = nullptr;
        std::rethrow_exception(e);
      }
      Batch previous = std::move(out);
      out = std::move(pf_->result);
      pf_->spare = std::move(previous);
      got = true;
    }
  }
  if (!got) produce(epoch_, step_, out);
  ++step_;
  launch(step_);
  return true;
}

}  // namespace ht
