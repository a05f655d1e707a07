#include "base/tensor.hpp"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>

namespace ht {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::i32: return 4;
    case DType::u8: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "float32";
    case DType::f64: return "float64";
    case DType::bf16: return "bfloat16";
    case DType::f16: return "float16";
    case DType::i32: return "int32";
    case DType::u8: return "uint8";
  }
  return "?";
}

const char* device_name(Device d) { return d == Device::cpu ? "cpu" : "cuda"; }

namespace {
DeviceAllocator make_cpu_allocator() {
  DeviceAllocator a;
  a.alloc = [](size_t bytes) -> void* {
    size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    if (!p) throw RuntimeError("host allocation of " + std::to_string(bytes) + " bytes failed");
    return p;
  };
  a.free = [](void* p) { std::free(p); };
  a.copy = [](void* dst, const void* src, size_t bytes, Device, Device) { std::memcpy(dst, src, bytes); };
  a.zero = [](void* dst, size_t bytes) { std::memset(dst, 0, bytes); };
  return a;
}
DeviceAllocator g_alloc[2] = {make_cpu_allocator(), DeviceAllocator{}};
}  // namespace

void register_allocator(Device d, DeviceAllocator a) { g_alloc[static_cast<int>(d)] = std::move(a); }

const DeviceAllocator& allocator_for(Device d) {
  const auto& a = g_alloc[static_cast<int>(d)];
  if (!a.alloc)
    throw RuntimeError(std::string("no allocator for device ") + device_name(d) +
                       " (this build has no CUDA backend, or it was not initialised)");
  return a;
}

Storage::Storage(size_t nbytes, Device dev) : bytes(nbytes), device(dev) { ptr = allocator_for(dev).alloc(nbytes); }
Storage::~Storage() {
  if (ptr) allocator_for(device).free(ptr);
}

int64_t shape_numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

std::string shape_to_string(const std::vector<int64_t>& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

int64_t Tensor::numel() const { return shape_numel(shape_); }
std::string Tensor::shape_str() const { return shape_to_string(shape_); }

Tensor Tensor::empty(std::vector<int64_t> shape, DType dtype, Device device) {
  Tensor t;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.device_ = device;
  t.storage_ = std::make_shared<Storage>(static_cast<size_t>(t.numel()) * dtype_size(dtype), device);
  return t;
}

Tensor Tensor::zeros(std::vector<int64_t> shape, DType dtype, Device device) {
  Tensor t = empty(std::move(shape), dtype, device);
  t.zero_();
  return t;
}

Tensor Tensor::view(std::vector<int64_t> shape) const {
  if (shape_numel(shape) != numel())
    throw RuntimeError("Tensor::view: cannot view " + shape_str() + " as " + shape_to_string(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::slice_flat(int64_t offset, std::vector<int64_t> shape) const {
  int64_t n = shape_numel(shape);
  if (offset < 0 || offset + n > numel())
    throw RuntimeError("Tensor::slice_flat: [" + std::to_string(offset) + ", " + std::to_string(offset + n) +
                       ") outside " + shape_str());
  Tensor t = *this;
  t.offset_bytes_ = offset_bytes_ + static_cast<size_t>(offset) * dtype_size(dtype_);
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::narrow0(int64_t begin, int64_t end) const {
  if (shape_.empty() || begin < 0 || end > shape_[0] || begin > end)
    throw RuntimeError("Tensor::narrow0: rows [" + std::to_string(begin) + ", " + std::to_string(end) +
                       ") outside " + shape_str());
  auto s = shape_;
  int64_t row = numel() / (shape_[0] ? shape_[0] : 1);
  s[0] = end - begin;
  return slice_flat(begin * row, s);
}

Tensor Tensor::to(Device d) const {
  Tensor t = empty(shape_, dtype_, d);
  t.copy_from(*this);
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  if (src.numel() != numel() || src.dtype_ != dtype_)
    throw RuntimeError("Tensor::copy_from: " + src.shape_str() + " " + dtype_name(src.dtype_) + " into " +
                       shape_str() + " " + dtype_name(dtype_));
  Device via = (device_ == Device::cuda || src.device_ == Device::cuda) ? Device::cuda : Device::cpu;
  allocator_for(via).copy(raw(), src.raw(), nbytes(), device_, src.device_);
}

void Tensor::zero_() { allocator_for(device_).zero(raw(), nbytes()); }

void Tensor::ensure(std::vector<int64_t> shape, DType dtype, Device device) {
  if (defined() && shape == shape_ && dtype == dtype_ && device == device_) return;
  if (defined() && dtype == dtype_ && device == device_ && offset_bytes_ == 0 &&
      shape_numel(shape) * static_cast<int64_t>(dtype_size(dtype)) <= static_cast<int64_t>(storage_->bytes)) {
    shape_ = std::move(shape);  // reuse a larger buffer (e.g. the last, smaller eval batch)
    return;
  }
  *this = empty(std::move(shape), dtype, device);
}

void Tensor::check_dtype(DType want) const {
  if (want != dtype_)
    throw RuntimeError(std::string("tensor dtype is ") + dtype_name(dtype_) + ", accessed as " + dtype_name(want));
}

void Tensor::check_host() const {
  if (device_ != Device::cpu) throw RuntimeError("tensor is on " + std::string(device_name(device_)) + ", not cpu");
}

}  // namespace ht
