#pragma once
// Tensor: a shape, a dtype, a device and a view into reference-counted storage.
// Layout is row-major over the shape; activations are NCHW ([N, C, H, W]) unless a function says
// otherwise. Views (view(), slice()) share storage, which is how every parameter and gradient is a
// window into one flat buffer (see src/nn/params.hpp).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/bf16.hpp"
#include "base/error.hpp"

namespace ht {

enum class DType : uint8_t { f32, f64, bf16, f16, i32, u8 };
enum class Device : uint8_t { cpu, cuda };

/// Bytes per element of a dtype.
size_t dtype_size(DType t);
const char* dtype_name(DType t);
const char* device_name(Device d);

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::u8; }
template <> constexpr DType dtype_of<bf16>() { return DType::bf16; }
template <> constexpr DType dtype_of<f16>() { return DType::f16; }

/// Allocator hooks per device. CPU memory is 64-byte aligned host memory; the CUDA backend
/// registers its allocator (cudaMalloc with the OOM diagnosis) at start-up, so src/ never calls CUDA.
struct DeviceAllocator {
  std::function<void*(size_t bytes)> alloc;
  std::function<void(void*)> free;
  std::function<void(void* dst, const void* src, size_t bytes, Device dst_dev, Device src_dev)> copy;
  std::function<void(void* dst, size_t bytes)> zero;
};
void register_allocator(Device d, DeviceAllocator a);
const DeviceAllocator& allocator_for(Device d);

/// Raw storage owned by one device allocation.
struct Storage {
  void* ptr = nullptr;
  size_t bytes = 0;
  Device device = Device::cpu;
  Storage(size_t nbytes, Device dev);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
};

class Tensor {
 public:
  Tensor() = default;
  /// Uninitialised tensor. Throws RuntimeError when allocation fails.
  static Tensor empty(std::vector<int64_t> shape, DType dtype = DType::f32, Device device = Device::cpu);
  static Tensor zeros(std::vector<int64_t> shape, DType dtype = DType::f32, Device device = Device::cpu);

  bool defined() const { return storage_ != nullptr; }
  /// True when this tensor is the only holder of its storage (no copy or view of it exists), so its
  /// memory may be overwritten without another holder noticing.
  bool sole_owner() const { return storage_ != nullptr && storage_.use_count() == 1; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.at(static_cast<size_t>(i < 0 ? i + static_cast<int>(shape_.size()) : i)); }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }

  void* raw() const { return static_cast<char*>(storage_->ptr) + offset_bytes_; }
  template <class T> T* data() const {
    check_dtype(dtype_of<T>());
    return static_cast<T*>(raw());
  }
  /// Host span over the elements; throws if the tensor is not on the CPU.
  template <class T> std::span<T> span() const {
    check_host();
    return {data<T>(), static_cast<size_t>(numel())};
  }

  /// Same storage, another shape with the same element count.
  Tensor view(std::vector<int64_t> shape) const;
  /// Elements [offset, offset+count) of the flattened tensor as a tensor of the given shape.
  Tensor slice_flat(int64_t offset, std::vector<int64_t> shape) const;
  /// Rows [begin, end) along dimension 0.
  Tensor narrow0(int64_t begin, int64_t end) const;

  /// Deep copy to a device (same dtype).
  Tensor to(Device d) const;
  /// Copies elements from src (same numel and dtype; any devices).
  void copy_from(const Tensor& src);
  void zero_();
  /// Reallocates when the shape differs from the current one (keeps dtype and device); used for
  /// activation buffers that are reused step after step.
  void ensure(std::vector<int64_t> shape, DType dtype, Device device);

  std::string shape_str() const;
  bool same_shape(const Tensor& o) const { return shape_ == o.shape_; }

 private:
  void check_dtype(DType want) const;
  void check_host() const;
  std::shared_ptr<Storage> storage_;
  size_t offset_bytes_ = 0;
  std::vector<int64_t> shape_;
  DType dtype_ = DType::f32;
  Device device_ = Device::cpu;
};

/// Number of elements of a shape.
int64_t shape_numel(const std::vector<int64_t>& s);
std::string shape_to_string(const std::vector<int64_t>& s);

}  // namespace ht
