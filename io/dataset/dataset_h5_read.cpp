// The HDF5 dataset reader (io/dataset/dataset.hpp): a split's shards opened and validated
// (io/dataset/dataset_h5_schema.cpp), then samples served by pread() through each shard's chunk map, or by
// HDF5 hyperslab reads when a shard cannot be mapped.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <regex>

#include "io/dataset/dataset_h5.hpp"
#include "io/dataset/dataset_h5_shard.hpp"
#include "io/dataset/image_decode.hpp"
#include "io/fletcher32.hpp"
#include "io/h5_check.hpp"
#include "base/error.hpp"

namespace fs = std::filesystem;

namespace ht {
namespace dataset_h5 {

// Fills the direct-access map of an uncompressed shard when the layout allows it; returns quietly
// (HDF5 reads are used) otherwise. Throws UsageError when a chunk lies beyond the end of the file.
void map_chunks(Shard& s, int64_t sample, int64_t file_size) {
  // /images: rows of `sample` bytes, s.count of them; /encoded: rows of one byte, the last offset of them.
  const bool encoded = !s.encoded_offsets.empty();
  const int rank = encoded ? 1 : 4;
  const int64_t total = encoded ? s.encoded_offsets.back() : s.count;
  if (encoded) sample = 1;
  if (total == 0) return;
  H5Handle dcpl(H5Dget_create_plist(s.images), H5Pclose);
  if (!dcpl.valid()) return;
  // No filter, or fletcher32 alone (verified here on first read); anything else is read by HDF5.
  const int nfilters = H5Pget_nfilters(dcpl);
  bool checksummed = false;
  if (nfilters == 1) {
    unsigned flags = 0;
    size_t nelmts = 0;
    unsigned cd_values[1];
    char name[32];
    unsigned config = 0;
    if (H5Pget_filter2(dcpl, 0, &flags, &nelmts, cd_values, sizeof name, name, &config) != H5Z_FILTER_FLETCHER32) return;
    checksummed = true;
  } else if (nfilters != 0) {
    return;
  }
  const hsize_t tail = checksummed ? 4 : 0;  // the stored checksum after each chunk
  H5Handle fcpl(H5Fget_create_plist(s.file), H5Pclose);
  hsize_t userblock = 0;
  if (!fcpl.valid() || H5Pget_userblock(fcpl, &userblock) < 0) return;
  std::vector<uint64_t> addr;
  int64_t per = 0;
  H5D_layout_t layout = H5Pget_layout(dcpl);
  if (layout == H5D_CONTIGUOUS) {
    if (checksummed) return;  // HDF5 filters chunks only
    haddr_t a = H5Dget_offset(s.images);
    if (a == HADDR_UNDEF) return;
    per = s.count;
    addr.push_back(static_cast<uint64_t>(a));
  } else if (layout == H5D_CHUNKED) {
    hsize_t cd[4];
    if (H5Pget_chunk(dcpl, rank, cd) != rank) return;
    hsize_t dims[4];
    H5Sget_simple_extent_dims(s.fspace, dims, nullptr);
    // /images: chunks must be whole samples.
    if (rank == 4 && (cd[1] != dims[1] || cd[2] != dims[2] || cd[3] != dims[3])) return;
    per = static_cast<int64_t>(cd[0]);
    const int64_t expect = (total + per - 1) / per;
    // A dataspace of its own (selection: all): HDF5 1.10 refuses H5S_ALL in these two calls, and
    // s.fspace carries the last hyperslab selection.
    H5Handle all(H5Dget_space(s.images), H5Sclose);
    hsize_t nchunks = 0;
    if (!all.valid() || H5Dget_num_chunks(s.images, all, &nchunks) < 0 || static_cast<int64_t>(nchunks) != expect) return;
    addr.assign(static_cast<size_t>(expect), HADDR_UNDEF);
    for (hsize_t i = 0; i < nchunks; ++i) {
      hsize_t coord[4] = {0, 0, 0, 0};
      unsigned mask = 0;
      haddr_t a = HADDR_UNDEF;
      hsize_t size = 0;
      if (H5Dget_chunk_info(s.images, all, i, coord, &mask, &a, &size) < 0) return;
      if (size != static_cast<hsize_t>(per * sample) + tail || mask != 0 || coord[0] % cd[0] != 0) return;
      addr[coord[0] / cd[0]] = static_cast<uint64_t>(a);
    }
  } else {
    return;
  }
  for (size_t c = 0; c < addr.size(); ++c) {
    if (addr[c] == HADDR_UNDEF) return;
    addr[c] += userblock;
    // A checksummed chunk is stored whole (edge rows padded) with its checksum.
    int64_t rows = checksummed ? per : std::min<int64_t>(per, total - static_cast<int64_t>(c) * per);
    if (static_cast<int64_t>(addr[c]) + rows * sample + static_cast<int64_t>(tail) > file_size)
      throw UsageError(s.path + ": dataset " + s.data_name() + " chunk " + std::to_string(c) +
                       " lies beyond the end of the file (" + std::to_string(file_size) + " bytes; truncated file)");
  }
  int fd = ::open(s.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  s.fd.fd = fd;
  s.per_chunk = per;
  s.checksummed = checksummed;
  if (checksummed) {
    s.verified = std::make_unique<std::atomic<uint8_t>[]>(addr.size());
    for (size_t c = 0; c < addr.size(); ++c) s.verified[c].store(0, std::memory_order_relaxed);
  }
  s.chunk_addr = std::move(addr);
}

}  // namespace dataset_h5

namespace {

using namespace dataset_h5;

// Reads rows [first, first+len) of a shard's /images into dst: pread() through the chunk map when
// there is one, else an HDF5 hyperslab read under hdf5_mutex().
// pread() of exactly `bytes` at `off`, retrying short reads; throws RuntimeError naming the rows.
void pread_all(const Shard& s, uint8_t* p, size_t bytes, off_t off, int64_t r, int64_t end) {
  size_t done = 0;
  while (done < bytes) {
    ssize_t got = ::pread(s.fd.fd, p + done, bytes - done, off + static_cast<off_t>(done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      throw RuntimeError(s.path + ": reading " + s.data_name() + " " + s.unit() + " " + std::to_string(r) + ".." +
                         std::to_string(end - 1) + " failed: " + (got < 0 ? std::string(std::strerror(errno)) : std::string("unexpected end of file")));
    done += static_cast<size_t>(got);
  }
}

// The first read of checksummed chunk c: the whole stored chunk, its fletcher32 compared with the
// stored one (HDF5 stores it little-endian after the data), then rows [r, end) copied out.
void read_verified_chunk(Shard& s, int64_t c, int64_t r, int64_t end, size_t sample, uint8_t* p) {
  const size_t chunk_bytes = static_cast<size_t>(s.per_chunk) * sample;
  std::vector<uint8_t> buf(chunk_bytes + 4);
  pread_all(s, buf.data(), buf.size(), static_cast<off_t>(s.chunk_addr[static_cast<size_t>(c)]), r, end);
  const uint32_t want = static_cast<uint32_t>(buf[chunk_bytes]) | static_cast<uint32_t>(buf[chunk_bytes + 1]) << 8 |
                        static_cast<uint32_t>(buf[chunk_bytes + 2]) << 16 | static_cast<uint32_t>(buf[chunk_bytes + 3]) << 24;
  if (fletcher32_copy(nullptr, buf.data(), chunk_bytes) != want)
    throw RuntimeError(s.path + ": dataset " + s.data_name() + " chunk " + std::to_string(c) + " (" + s.unit() + " " +
                       std::to_string(c * s.per_chunk) + ".." + std::to_string((c + 1) * s.per_chunk - 1) +
                       ") fails its fletcher32 checksum: the file is corrupt (re-create it with hpctrain prepare)");
  std::memcpy(p, buf.data() + static_cast<size_t>(r - c * s.per_chunk) * sample, static_cast<size_t>(end - r) * sample);
  s.verified[static_cast<size_t>(c)].store(1, std::memory_order_release);
}

void read_rows(Shard& s, int64_t first, int64_t len, size_t sample, const DatasetInfo& info, uint8_t* dst) {
  if (s.fd.fd >= 0) {
    int64_t r = first;
    while (r < first + len) {
      int64_t c = r / s.per_chunk;
      int64_t end = std::min(first + len, (c + 1) * s.per_chunk);
      uint8_t* p = dst + static_cast<size_t>(r - first) * sample;
      if (s.checksummed && !s.verified[static_cast<size_t>(c)].load(std::memory_order_acquire)) {
        read_verified_chunk(s, c, r, end, sample, p);
      } else {
        off_t off = static_cast<off_t>(s.chunk_addr[static_cast<size_t>(c)] + static_cast<uint64_t>(r - c * s.per_chunk) * sample);
        pread_all(s, p, static_cast<size_t>(end - r) * sample, off, r, end);
      }
      r = end;
    }
    return;
  }
  std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
  hsize_t start[4] = {static_cast<hsize_t>(first), 0, 0, 0};
  hsize_t cnt[4] = {static_cast<hsize_t>(len), static_cast<hsize_t>(info.height), static_cast<hsize_t>(info.width),
                    static_cast<hsize_t>(info.channels)};
  H5Handle ms(HT_H5_CHECK(H5Screate_simple(4, cnt, nullptr)), H5Sclose);
  HT_H5_CHECK(H5Sselect_hyperslab(s.fspace, H5S_SELECT_SET, start, nullptr, cnt, nullptr));
  if (H5Dread(s.images, H5T_NATIVE_UINT8, ms, s.fspace, H5P_DEFAULT, dst) < 0)
    throw RuntimeError(s.path + ": reading /images rows " + std::to_string(first) + ".." +
                       std::to_string(first + len - 1) + " failed");
}

class H5ShardedDataset final : public Dataset {
 public:
  H5ShardedDataset(std::vector<Shard> shards, std::vector<int32_t> labels, DatasetInfo info)
      : shards_(std::move(shards)), labels_(std::move(labels)), info_(std::move(info)) {
    sample_ = static_cast<size_t>(info_.height) * info_.width * info_.channels;
    for (auto& s : shards_) starts_.push_back(s.offset);
  }
  ~H5ShardedDataset() override {
    std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
    shards_.clear();
  }
  const DatasetInfo& info() const override { return info_; }

  void read(std::span<const int64_t> indices, std::span<uint8_t> images, std::span<int32_t> labels) override {
    const size_t n = indices.size();
    if (images.size() != n * sample_ || labels.size() != n)
      throw UsageError("Dataset::read: buffers of " + std::to_string(images.size()) + " bytes / " +
                       std::to_string(labels.size()) + " labels for " + std::to_string(n) + " samples");
    std::vector<std::pair<int64_t, size_t>> order(n);
    for (size_t i = 0; i < n; ++i) {
      if (indices[i] < 0 || indices[i] >= info_.num_samples)
        throw UsageError("Dataset::read: sample index " + std::to_string(indices[i]) + " outside [0, " +
                         std::to_string(info_.num_samples) + ")");
      order[i] = {indices[i], i};
      labels[i] = labels_[static_cast<size_t>(indices[i])];
    }
    if (info_.encoded) {
      for (size_t q = 0; q < n; ++q) read_encoded(indices[q], images.data() + q * sample_);
      return;
    }
    std::sort(order.begin(), order.end());
    std::vector<uint8_t> scratch;
    size_t i = 0;
    while (i < n) {
      // A run of consecutive indices inside one shard becomes one hyperslab read.
      int64_t first = order[i].first;
      size_t k = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), first) - starts_.begin()) - 1;
      Shard& s = shards_[k];
      size_t j = i + 1;
      while (j < n && order[j].first <= order[j - 1].first + 1 && order[j].first < s.offset + s.count) ++j;
      // Distinct indices in the run (duplicates are allowed in `indices`).
      int64_t len = order[j - 1].first - first + 1;
      bool direct = (j - i == static_cast<size_t>(len));
      // When the run maps to consecutive output slots we read straight into the output.
      for (size_t q = i + 1; direct && q < j; ++q) direct = order[q].second == order[q - 1].second + 1;
      if (!direct) scratch.resize(static_cast<size_t>(len) * sample_);
      uint8_t* dst = direct ? images.data() + order[i].second * sample_ : scratch.data();
      read_rows(s, first - s.offset, len, sample_, info_, dst);
      if (!direct)
        for (size_t q = i; q < j; ++q)
          std::copy_n(scratch.data() + static_cast<size_t>(order[q].first - first) * sample_, sample_,
                      images.data() + order[q].second * sample_);
      i = j;
    }
  }

  void read_window(int64_t index, const std::function<CropBox(int, int)>& pick, int min_w, int min_h, Image8& decoded,
                   CropBox& window, int32_t& label) override {
    if (!info_.encoded) Dataset::read_window(index, pick, min_w, min_h, decoded, window, label);
    if (index < 0 || index >= info_.num_samples)
      throw UsageError("Dataset::read_window: sample index " + std::to_string(index) + " outside [0, " +
                       std::to_string(info_.num_samples) + ")");
    label = labels_[static_cast<size_t>(index)];
    const std::vector<uint8_t> bytes = encoded_bytes(index);
    const Shard& s = shard_of(index);
    const int64_t r = index - s.offset;
    std::string why;
    if (!decode_image_window(bytes, info_.channels, ImageLimits{}, pick, min_w, min_h, decoded, window, why))
      throw RuntimeError(s.path + ": sample " + std::to_string(r) + " of /encoded cannot be decoded: " + why);
  }

 private:
  Shard& shard_of(int64_t index) {
    return shards_[static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), index) - starts_.begin()) - 1];
  }

  // An encoded sample's bytes, read with pread() through the chunk map of /encoded (each chunk's
  // fletcher32 verified on its first read), or through HDF5 under its lock when the layout has no
  // map; decoding happens outside any lock, so several loader threads decode at once.
  std::vector<uint8_t> encoded_bytes(int64_t index) {
    Shard& s = shard_of(index);
    const int64_t r = index - s.offset;
    const int64_t b = s.encoded_offsets[static_cast<size_t>(r)], e = s.encoded_offsets[static_cast<size_t>(r) + 1];
    std::vector<uint8_t> bytes(static_cast<size_t>(e - b));
    if (e > b && s.fd.fd >= 0) {
      read_rows(s, b, e - b, 1, info_, bytes.data());  // pread through the chunk map, no HDF5 lock
    } else if (e > b) {
      std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
      hsize_t start = static_cast<hsize_t>(b), cnt = static_cast<hsize_t>(e - b);
      H5Handle ms(HT_H5_CHECK(H5Screate_simple(1, &cnt, nullptr)), H5Sclose);
      HT_H5_CHECK(H5Sselect_hyperslab(s.fspace, H5S_SELECT_SET, &start, nullptr, &cnt, nullptr));
      if (H5Dread(s.images, H5T_NATIVE_UINT8, ms, s.fspace, H5P_DEFAULT, bytes.data()) < 0)
        throw RuntimeError(s.path + ": reading /encoded bytes " + std::to_string(b) + ".." + std::to_string(e - 1) +
                           " (sample " + std::to_string(r) + ") failed (corrupt file?)");
    }
    return bytes;
  }

  // An encoded sample as `prepare` would have stored it raw: decoded, resized, centre-cropped.
  void read_encoded(int64_t index, uint8_t* dst) {
    const std::vector<uint8_t> bytes = encoded_bytes(index);
    Image8 img;
    std::string why;
    if (!decode_image(bytes, info_.channels, ImageLimits{}, info_.height, img, why))
      throw RuntimeError(shard_of(index).path + ": sample " + std::to_string(index - shard_of(index).offset) +
                         " of /encoded cannot be decoded: " + why);
    Image8 out = resize_shorter_center_crop(img, info_.height);
    std::memcpy(dst, out.pixels.data(), sample_);
  }

  std::vector<Shard> shards_;
  std::vector<int64_t> starts_;
  std::vector<int32_t> labels_;
  DatasetInfo info_;
  size_t sample_ = 0;
};

std::shared_ptr<Dataset> open_shards(const std::vector<std::string>& paths, const std::string& split,
                                     bool check_index) {
  H5Section section;  // the HDF5 lock, HDF5's own error printing off
  std::vector<Shard> shards;
  std::vector<int32_t> labels;
  DatasetInfo info;
  int64_t offset = 0;
  for (size_t k = 0; k < paths.size(); ++k) {
    ShardMeta m;
    Shard s = open_shard(paths[k], m, labels);
    if (check_index) check_shard_place(paths[k], m, split, k, paths.size());
    if (k == 0) info = m.info;
    else check_same_schema(paths[k], m.info, paths[0], info);
    if (m.version == 1) info.version1_shards.push_back(paths[k]);
    s.offset = offset;
    offset += s.count;
    shards.push_back(std::move(s));
  }
  info.num_samples = offset;
  if (!paths.empty()) info.first_shard = paths[0];
  return std::make_shared<H5ShardedDataset>(std::move(shards), std::move(labels), std::move(info));
}

}  // namespace

void check_splits_agree(const DatasetInfo& train, const DatasetInfo& test) {
  if (train.first_shard.empty() || test.first_shard.empty()) return;
  check_same_schema(test.first_shard, test, train.first_shard, train);
}

std::shared_ptr<Dataset> open_dataset_shard(const std::string& path) { return open_shards({path}, "", false); }

std::shared_ptr<Dataset> open_sharded_dataset(const std::string& dir, const std::string& split) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    // Say where a relative path was looked for: from a config file, users expect the file's directory.
    std::string where;
    if (fs::path(dir).is_relative()) {
      const auto cwd = fs::current_path(ec);
      where = " (a relative path is resolved against the working directory " + (ec ? std::string("?") : cwd.string()) +
              ", not against the config file's directory)";
    }
    throw UsageError(dir + ": dataset directory does not exist" + where);
  }
  // Collect <split>-KKKKK-of-SSSSS.h5 and require one complete, consistently numbered set.
  std::regex re(split + R"(-(\d{5})-of-(\d{5})\.h5)");
  std::map<int, std::string> found;
  int total = -1;
  for (auto& e : fs::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    std::smatch m;
    if (!std::regex_match(name, m, re)) continue;
    int k = std::stoi(m[1]), s = std::stoi(m[2]);
    if (total >= 0 && s != total)
      throw UsageError(e.path().string() + ": shard count " + std::to_string(s) + " in the file name differs from " +
                       std::to_string(total) + " in " + found.begin()->second);
    total = s;
    found[k] = e.path().string();
  }
  if (found.empty())
    throw UsageError(dir + ": no " + split + " shards (" + split + "-00000-of-0000N.h5); prepare the data with "
                     "'hpctrain prepare'");
  std::vector<std::string> paths;
  for (int k = 0; k < total; ++k) {
    auto it = found.find(k);
    if (it == found.end())
      throw UsageError((fs::path(dir) / shard_file_name(split, k, total)).string() + ": dataset shard missing (" +
                       std::to_string(found.size()) + " of " + std::to_string(total) + " present)");
    paths.push_back(it->second);
  }
  if (static_cast<int>(found.size()) != total)
    throw UsageError(found.rbegin()->second + ": shard index beyond num_shards " + std::to_string(total));
  return open_shards(paths, split, true);
}

}  // namespace ht
