// torchvision ImageFolder's file discovery, the seeded validation split, and one shard's conversion.
#include "io/dataset/imagefolder.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "base/error.hpp"
#include "io/dataset/dataset.hpp"

namespace fs = std::filesystem;

namespace ht {

bool has_image_extension(const std::string& name) {
  // torchvision.datasets.folder.IMG_EXTENSIONS
  static const char* const exts[] = {".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"};
  std::string lower = name.substr(name.size() > 5 ? name.size() - 5 : 0);
  for (char& c : lower) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  for (const char* e : exts) {
    size_t n = std::strlen(e);
    if (lower.size() >= n && lower.compare(lower.size() - n, n, e) == 0) return true;
  }
  return false;
}

namespace {

bool is_dir_following_links(const fs::directory_entry& e) {
  std::error_code ec;
  return fs::is_directory(e.path(), ec);  // follows a symbolic link, as Python's DirEntry.is_dir()
}

// os.walk(top, followlinks=True): every folder with the names of its non-folder entries. A folder
// reached twice through links is walked once (os.walk would loop).
void walk(const std::string& top, std::set<std::string>& seen, std::vector<std::pair<std::string, std::vector<std::string>>>& out) {
  std::error_code ec;
  std::string canon = fs::canonical(top, ec).string();
  if (ec || !seen.insert(canon).second) return;
  std::vector<std::string> dirs, files;
  for (const auto& e : fs::directory_iterator(top, ec)) {
    std::string name = e.path().filename().string();
    (is_dir_following_links(e) ? dirs : files).push_back(name);
  }
  if (ec) throw UsageError(top + ": cannot list the folder: " + ec.message());
  out.emplace_back(top, std::move(files));
  for (const auto& d : dirs) walk(top + "/" + d, seen, out);
}

}  // namespace

std::vector<ImageFile> scan_image_folder(const std::string& root, std::vector<std::string>& classes) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) throw UsageError(root + ": not a folder");
  classes.clear();
  for (const auto& e : fs::directory_iterator(root, ec))
    if (is_dir_following_links(e)) classes.push_back(e.path().filename().string());
  if (ec) throw UsageError(root + ": cannot list the folder: " + ec.message());
  if (classes.empty())
    throw UsageError(root + ": no class folders (expected one subfolder of images per class, as torchvision's ImageFolder)");
  std::sort(classes.begin(), classes.end());  // byte order of UTF-8 = Python's code point order
  std::vector<ImageFile> files;
  const std::string base = fs::path(root).lexically_normal().string();
  for (size_t c = 0; c < classes.size(); ++c) {
    std::vector<std::pair<std::string, std::vector<std::string>>> folders;
    std::set<std::string> seen;
    walk(root + "/" + classes[c], seen, folders);
    std::sort(folders.begin(), folders.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    const size_t before = files.size();
    for (auto& [dir, names] : folders) {
      std::sort(names.begin(), names.end());
      for (const auto& n : names) {
        if (!has_image_extension(n)) continue;
        ImageFile f;
        f.path = dir + "/" + n;
        f.rel = fs::path(f.path).lexically_normal().lexically_relative(base).string();
        f.label = static_cast<int32_t>(c);
        files.push_back(std::move(f));
      }
    }
    if (files.size() == before)
      throw UsageError(root + "/" + classes[c] + ": class folder '" + classes[c] +
                       "' has no image files (.jpg .jpeg .png ...); remove it or add its images");
  }
  return files;
}

ImageFolderPlan plan_image_folder(const std::string& input, double val_fraction, uint64_t seed) {
  std::error_code ec;
  if (!fs::is_directory(input, ec)) throw UsageError(input + ": --input folder does not exist");
  ImageFolderPlan plan;
  const std::string train_dir = input + "/train", val_dir = input + "/val";
  if (fs::is_directory(train_dir, ec)) {
    if (val_fraction != 0)
      throw UsageError("--val-fraction " + std::to_string(val_fraction) + ": " + input +
                       " has a train/ folder, whose validation images are taken from " + val_dir + "; leave --val-fraction out");
    if (!fs::is_directory(val_dir, ec))
      throw UsageError(val_dir + ": missing (" + train_dir + " exists, so the validation images are expected in " + val_dir + ")");
    plan.train = scan_image_folder(train_dir, plan.classes);
    std::vector<std::string> val_classes;
    plan.test = scan_image_folder(val_dir, val_classes);
    if (val_classes != plan.classes) {
      std::string diff;
      for (auto& c : val_classes)
        if (!std::binary_search(plan.classes.begin(), plan.classes.end(), c)) diff += " '" + c + "' only in val;";
      for (auto& c : plan.classes)
        if (!std::binary_search(val_classes.begin(), val_classes.end(), c)) diff += " '" + c + "' only in train;";
      throw UsageError(val_dir + ": class folders differ from " + train_dir + "'s (labels would not agree):" + diff);
    }
    for (auto& f : plan.train) f.rel = "train/" + f.rel;
    for (auto& f : plan.test) f.rel = "val/" + f.rel;
    plan.layout = "DIR/train and DIR/val";
    return plan;
  }
  if (!(val_fraction > 0 && val_fraction < 1))
    throw UsageError("--val-fraction " + std::to_string(val_fraction) + ": must be in (0, 1) when " + input +
                     " has no train/ and val/ folders");
  std::vector<ImageFile> all = scan_image_folder(input, plan.classes);
  // Per class: a seeded permutation of its n files; the first round(f * n) go to the test split.
  size_t b = 0;
  while (b < all.size()) {
    size_t e = b;
    while (e < all.size() && all[e].label == all[b].label) ++e;
    const int64_t n = static_cast<int64_t>(e - b);
    int64_t n_val = std::min<int64_t>(std::llround(val_fraction * static_cast<double>(n)), n - 1);
    std::vector<int64_t> perm = epoch_permutation(n, seed, all[b].label);
    std::vector<char> is_val(static_cast<size_t>(n), 0);
    for (int64_t i = 0; i < n_val; ++i) is_val[static_cast<size_t>(perm[static_cast<size_t>(i)])] = 1;
    for (int64_t i = 0; i < n; ++i) (is_val[static_cast<size_t>(i)] ? plan.test : plan.train).push_back(all[b + static_cast<size_t>(i)]);
    b = e;
  }
  char buf[96];
  std::snprintf(buf, sizeof buf, "DIR, val_fraction %g, seed %llu", val_fraction, static_cast<unsigned long long>(seed));
  plan.layout = buf;
  return plan;
}

namespace {

// Reads a whole file of at most max_bytes; false with a reason otherwise.
bool read_file_bytes(const std::string& path, int64_t max_bytes, std::vector<uint8_t>& out, std::string& reason) {
  std::error_code ec;
  auto st = fs::status(path, ec);
  if (ec || !fs::exists(st)) {
    reason = "cannot read: " + (ec ? ec.message() : std::string("no such file (a broken link?)"));
    return false;
  }
  if (!fs::is_regular_file(st)) {
    reason = "not a regular file";
    return false;
  }
  const auto size = fs::file_size(path, ec);
  if (ec) {
    reason = "cannot read: " + ec.message();
    return false;
  }
  if (static_cast<int64_t>(size) > max_bytes) {
    reason = "file of " + std::to_string(size) + " bytes, over the limit of " + std::to_string(max_bytes);
    return false;
  }
  std::ifstream in(path, std::ios::binary);
  out.resize(size);
  if (!in || !in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(size))) {
    reason = "cannot read: " + std::string(std::strerror(errno));
    return false;
  }
  return true;
}

}  // namespace

ConvertedShard convert_image_files(std::span<const ImageFile> files, const ImageConvertOptions& opt) {
  const size_t n = files.size();
  const size_t sample = static_cast<size_t>(opt.size) * opt.size * opt.channels;
  std::vector<uint8_t> slots(n * sample);
  std::vector<std::vector<uint8_t>> stored(opt.encoded ? n : 0);
  std::vector<std::string> reasons(n);
  std::vector<char> ok(n, 0);
  std::atomic<size_t> next{0};
  auto work = [&] {
    std::vector<uint8_t> bytes;
    for (size_t i = next++; i < n; i = next++) {
      Image8 img;
      std::string why;
      if (!read_file_bytes(files[i].path, opt.max_file_bytes, bytes, why)) {
        reasons[i] = why;
        continue;
      }
      if (opt.encoded && opt.max_side > 0) {  // too large: the file, scaled to max_side, as JPEG
        Image8 full;
        if (!decode_image(bytes, opt.channels, opt.limits, 0, full, why)) {
          reasons[i] = why;
          continue;
        }
        if (std::max(full.width, full.height) > opt.max_side) bytes = encode_jpeg(fit_longer_side(full, opt.max_side), 90);
      }
      if (!decode_image(bytes, opt.channels, opt.limits, opt.size, img, why)) {
        reasons[i] = why;
        continue;
      }
      if (opt.encoded) stored[i] = bytes;
      Image8 out = resize_shorter_center_crop(img, opt.size);
      std::memcpy(&slots[i * sample], out.pixels.data(), sample);
      ok[i] = 1;
    }
  };
  const int threads = std::max(1, std::min<int>(opt.threads, static_cast<int>(std::max<size_t>(n, 1))));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();

  ConvertedShard r;
  r.sum.assign(static_cast<size_t>(opt.channels), 0);
  r.sum_sq.assign(static_cast<size_t>(opt.channels), 0);
  for (size_t i = 0; i < n; ++i) {
    if (!ok[i]) {
      r.skipped.emplace_back(files[i].rel, reasons[i]);
      continue;
    }
    const uint8_t* p = &slots[i * sample];
    for (int c = 0; c < opt.channels; ++c) {  // per channel, 32-bit partial sums (an image is < 2^24 pixels)
      uint32_t s1 = 0;
      uint64_t s2 = 0;
      for (size_t k = static_cast<size_t>(c); k < sample; k += static_cast<size_t>(opt.channels)) {
        s1 += p[k];
        s2 += static_cast<uint32_t>(p[k]) * p[k];
      }
      r.sum[static_cast<size_t>(c)] += s1;
      r.sum_sq[static_cast<size_t>(c)] += s2;
    }
    if (r.kept.size() != i) std::memmove(&slots[r.kept.size() * sample], p, sample);
    r.kept.push_back(files[i].rel);
    r.labels.push_back(files[i].label);
    if (opt.encoded) {
      r.encoded.bytes.insert(r.encoded.bytes.end(), stored[i].begin(), stored[i].end());
      r.encoded.offsets.push_back(static_cast<int64_t>(r.encoded.bytes.size()));
    }
  }
  slots.resize(opt.encoded ? 0 : r.kept.size() * sample);
  r.images = std::move(slots);
  return r;
}

}  // namespace ht
