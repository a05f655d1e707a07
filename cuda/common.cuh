#pragma once
// Shared helpers of the CUDA op implementations (arguments arrive validated): launch geometry, RAII cuDNN
// descriptors. Included by cuda/*.cu only.
#include <cudnn.h>

#include <string>
#include <vector>

#include "cuda/check.hpp"
#include "cuda/cuda_context.hpp"
#include "src/base/op_cache.hpp"
#include "src/base/op_check.hpp"
#include "src/base/op_shapes.hpp"
#include "src/base/tensor.hpp"

namespace ht::cuda {

constexpr int kThreads = 256;
/// Blocks for a grid-stride loop over n elements (capped; the loop covers the rest).
inline unsigned blocks_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  if (b < 1) b = 1;
  if (b > 65536) b = 65536;
  return static_cast<unsigned>(b);
}

/// Checks the launch just issued (bad configuration); execution errors surface at the next sync.
#define HT_KERNEL_CHECK() HT_CUDA_CHECK(cudaGetLastError())

/// RAII cudnnTensorDescriptor_t for a packed float32 NCHW tensor.
class TensorDesc {
 public:
  TensorDesc() { HT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d_)); }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d_); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
  void set(int n, int c, int h, int w) {
    HT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, h, w));
  }
  cudnnTensorDescriptor_t get() const { return d_; }

 private:
  cudnnTensorDescriptor_t d_ = nullptr;
};

/// Alpha/beta scalars for cuDNN/cuBLAS calls (host pointer mode, float32 data).
struct Scalars {
  static const float* one() {
    static const float v = 1.f;
    return &v;
  }
  static const float* zero() {
    static const float v = 0.f;
    return &v;
  }
  static const float* beta(bool accumulate) { return accumulate ? one() : zero(); }
};

}  // namespace ht::cuda
