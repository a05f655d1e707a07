#pragma once
// Shared helpers of the CUDA op implementations (arguments arrive validated): launch geometry, RAII cuDNN
// descriptors. Included by the GPU halves (src/ops/*_gpu.cu) only.
#include <cudnn.h>

#include <string>
#include <vector>

#include "cuda/check.hpp"
#include "cuda/cuda_context.hpp"
#include "src/ops/op_cache.hpp"
#include "src/ops/op_check.hpp"
#include "src/ops/op_shapes.hpp"
#include "base/tensor.hpp"

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

/// How a 4-D activation tensor [N, C, H, W] is stored on the GPU: its element type and whether
/// its memory order is NCHW or NHWC (channels-last, what the tensor cores want for bf16/fp16).
struct ActFormat {
  DType dtype = DType::f32;
  bool nhwc = false;
  bool low_precision() const { return dtype == DType::bf16 || dtype == DType::f16; }
  bool operator==(const ActFormat&) const = default;
};

/// The activation format of `x` on the GPU: float32 tensors are NCHW, 4-D bfloat16 and float16 ones
/// NHWC (logical shape [N,C,H,W] kept); tensors of other ranks are row-major in every dtype.
ActFormat act_format(const Tensor& x);

/// CUDNN_DATA_FLOAT, _BFLOAT16 or _HALF; throws RuntimeError for another dtype.
cudnnDataType_t cudnn_type(DType t);

/// RAII cudnnTensorDescriptor_t for a packed 4-D tensor of logical shape [N, C, H, W].
class TensorDesc {
 public:
  TensorDesc() { HT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d_)); }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d_); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
  /// Float32 NCHW.
  void set(int n, int c, int h, int w) { set(n, c, h, w, ActFormat{}); }
  /// The dtype and memory order of `f` (dims stay logical: cuDNN takes N, C, H, W for NHWC too).
  void set(int n, int c, int h, int w, ActFormat f) {
    HT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d_, f.nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                              cudnn_type(f.dtype), n, c, h, w));
  }
  cudnnTensorDescriptor_t get() const { return d_; }

 private:
  cudnnTensorDescriptor_t d_ = nullptr;
};

/// Alpha/beta scalars for cuDNN/cuBLAS calls (host pointer mode). float for float32, bfloat16 and
/// float16 data alike: cuDNN takes float scaling factors for all three, and every cuBLAS call here
/// computes in CUBLAS_COMPUTE_32F, whose scalars are float.
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
