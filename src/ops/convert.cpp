// convert: the dispatcher (arguments checked once, then this file's CPU half or the GPU half in
// src/ops/convert_gpu.cu, CUDA builds only) and the CPU half.
#include "src/ops/convert.hpp"

#include <cstdint>

namespace ht {

void convert_tensor(const Tensor& src, Tensor& dst) {
  const OpArgs a("convert_tensor", src);
  a.act(src, "src").act(dst, "dst", src.shape());
  if (a.device() == Device::cpu) return convert_tensor_cpu(src, dst);
  if constexpr (kHaveCuda) return convert_tensor_gpu(src, dst);
  no_cuda("convert_tensor");
}

}  // namespace ht

// ---- The CPU half ----
// CPU conversions between activation formats: own loops over the rounding of base/bf16.hpp
// (the functions the CUDA kernels use too), so every float -> bf16/fp16 rounding in hpctrain is the
// same tested code. 4-D tensors change memory order with the dtype (float32 NCHW <-> low-precision
// NHWC: one pass over the planes, channel-innermost writes); other ranks convert in memory order.
namespace ht {
namespace {

// Below this many elements a parallel region costs more than it saves.
constexpr int64_t kParallelMin = 1 << 15;

float load(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::bf16: return f32_from_bf16_bits(static_cast<const uint16_t*>(p)[i]);
    case DType::f16: return f32_from_f16_bits(static_cast<const uint16_t*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}
void store(void* p, DType t, int64_t i, float v) {
  switch (t) {
    case DType::bf16: static_cast<uint16_t*>(p)[i] = bf16_bits_from_f32(v); break;
    case DType::f16: static_cast<uint16_t*>(p)[i] = f16_bits_from_f32(v); break;
    default: static_cast<float*>(p)[i] = v; break;
  }
}

/// Memory index of logical element (n, c, hw) of an [N,C,H*W] tensor in dtype t's memory order.
inline int64_t index_of(bool nhwc, int64_t n, int64_t c, int64_t hw, int64_t C, int64_t HW) {
  return nhwc ? (n * HW + hw) * C + c : (n * C + c) * HW + hw;
}

}  // namespace

// The CPU half: the functions declared in src/ops/convert.hpp.
void convert_tensor_cpu(const Tensor& src, Tensor& dst) {
  const DType st = src.dtype(), dt = dst.dtype();
  const void* s = src.raw();
  void* d = dst.raw();
  const int64_t total = src.numel();
  const bool s_nhwc = low_precision(st), d_nhwc = low_precision(dt);
  if (src.ndim() != 4 || s_nhwc == d_nhwc) {
    if (st == DType::f32 && dt == DType::bf16) {  // the common case, vectorised
      const float* sp = static_cast<const float*>(s);
      uint16_t* dp = static_cast<uint16_t*>(d);
#pragma omp parallel for simd if (total >= kParallelMin) schedule(static)
      for (int64_t i = 0; i < total; ++i) dp[i] = bf16_bits_from_f32(sp[i]);
      return;
    }
#pragma omp parallel for if (total >= kParallelMin) schedule(static)
    for (int64_t i = 0; i < total; ++i) store(d, dt, i, load(s, st, i));
    return;
  }
  const int64_t N = src.dim(0), C = src.dim(1), HW = src.dim(2) * src.dim(3);
#pragma omp parallel for collapse(2) if (total >= kParallelMin) schedule(static)
  for (int64_t n = 0; n < N; ++n)
    for (int64_t hw = 0; hw < HW; ++hw)
      for (int64_t c = 0; c < C; ++c)
        store(d, dt, index_of(d_nhwc, n, c, hw, C, HW), load(s, st, index_of(s_nhwc, n, c, hw, C, HW)));
}

}  // namespace ht
