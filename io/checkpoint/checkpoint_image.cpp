// The reusable in-memory file image of the checkpoint writer (io/checkpoint/checkpoint_image.hpp).
#include "io/checkpoint/checkpoint_image.hpp"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <utility>

#include "io/h5.hpp"

namespace ht {
namespace {

std::mutex g_image_cache_mu;
ImageBuffer g_image_cache;

// Keeps the larger of `b` and the cached buffer in the cache, frees the other.
void return_to_cache(ImageBuffer& b) {
  if (!b.ptr) return;
  std::lock_guard<std::mutex> lk(g_image_cache_mu);
  if (g_image_cache.cap < b.cap && b.cap <= (size_t(4) << 30)) std::swap(g_image_cache, b);
  std::free(b.ptr);
  b = {};
}

void* img_malloc(size_t size, H5FD_file_image_op_t, void*) { return std::malloc(size); }
void* img_memcpy(void* dst, const void* src, size_t size, H5FD_file_image_op_t, void*) {
  return std::memcpy(dst, src, size);
}
void* img_realloc(void* ptr, size_t size, H5FD_file_image_op_t, void* udata) {
  auto* c = static_cast<ImageCapture*>(udata);
  if ((ptr == nullptr && !c->in_use) || (ptr != nullptr && ptr == c->buf.ptr)) {
    if (size > c->buf.cap) {
      void* n = std::realloc(c->buf.ptr, size);
      if (!n) return nullptr;
      c->buf.ptr = n;
      c->buf.cap = size;
    }
    c->in_use = true;
    return c->buf.ptr;
  }
  return std::realloc(ptr, size);
}
herr_t img_free(void* ptr, H5FD_file_image_op_t op, void* udata) {
  auto* c = static_cast<ImageCapture*>(udata);
  if (ptr != nullptr && ptr == c->buf.ptr) {
    c->in_use = false;
    if (op == H5FD_FILE_IMAGE_OP_FILE_CLOSE) c->closed = ptr;
  } else {
    std::free(ptr);
  }
  return 0;
}
void* img_udata_copy(void* udata) { return udata; }
herr_t img_udata_free(void*) { return 0; }

}  // namespace

ImageCapture::ImageCapture() {
  std::lock_guard<std::mutex> lk(g_image_cache_mu);
  std::swap(buf, g_image_cache);
}

ImageCapture::~ImageCapture() {
  if (!in_use) return_to_cache(buf);  // still in use: HDF5 failed to close; leave it to HDF5
}

void ImageCapture::install(hid_t fapl) {
  H5FD_file_image_callbacks_t cb{img_malloc, img_memcpy, img_realloc, img_free, img_udata_copy, img_udata_free, this};
  h5(H5Pset_file_image_callbacks(fapl, &cb), "H5Pset_file_image_callbacks");
}

}  // namespace ht
