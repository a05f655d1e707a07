// Pooling. Max pool through cuDNN (CUDNN_POOLING_MAX_DETERMINISTIC: backward routes each window's
// gradient to its arg-max, deterministically). Padding must act as -inf (PyTorch); the GPU test
// checks pad 1 with negative inputs against the CPU implementation.
// Global average pool through own kernels: one thread per (n, c) plane for the forward (a plane is
// H*W <= a few hundred elements in the models here), one per element for the backward.
#include "cuda/common.cuh"
#include "src/base/op_halves.hpp"

namespace ht::cuda {
namespace {

struct PoolCache : OpCache {
  bool valid = false;
  PoolShape sh;
  TensorDesc x, y;
  cudnnPoolingDescriptor_t pool = nullptr;
  PoolCache() { HT_CUDNN_CHECK(cudnnCreatePoolingDescriptor(&pool)); }
  ~PoolCache() override { cudnnDestroyPoolingDescriptor(pool); }
};

PoolCache& prepare(OpCachePtr& slot, const PoolShape& sh) {
  PoolCache& pc = cache_as<PoolCache>(slot);
  if (pc.valid && pc.sh.n == sh.n && pc.sh.c == sh.c && pc.sh.h == sh.h && pc.sh.w == sh.w &&
      pc.sh.kernel == sh.kernel && pc.sh.stride == sh.stride && pc.sh.pad == sh.pad)
    return pc;
  pc.x.set(sh.n, sh.c, sh.h, sh.w);
  pc.y.set(sh.n, sh.c, sh.p(), sh.q());
  // CUDNN_PROPAGATE_NAN: a window holding a NaN gives NaN, as PyTorch's max pooling (not the
  // largest number beside it, which would hide a divergence from the loss check).
  HT_CUDNN_CHECK(cudnnSetPooling2dDescriptor(pc.pool, CUDNN_POOLING_MAX_DETERMINISTIC, CUDNN_PROPAGATE_NAN,
                                             sh.kernel, sh.kernel, sh.pad, sh.pad, sh.stride, sh.stride));
  int n = 0, c = 0, h = 0, w = 0;
  HT_CUDNN_CHECK(cudnnGetPooling2dForwardOutputDim(pc.pool, pc.x.get(), &n, &c, &h, &w));
  if (h != sh.p() || w != sh.q())
    throw RuntimeError("maxpool2d: cuDNN output " + std::to_string(h) + "x" + std::to_string(w) +
                       " differs from the expected " + std::to_string(sh.p()) + "x" + std::to_string(sh.q()));
  pc.sh = sh;
  pc.valid = true;
  return pc;
}

__global__ void gap_forward_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t planes, int hw) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < planes; i += int64_t{gridDim.x} * blockDim.x) {
    const float* p = x + i * hw;
    float s = 0.f;
    for (int j = 0; j < hw; ++j) s += p[j];
    y[i] = s * (1.f / static_cast<float>(hw));  // as the CPU: sum times the reciprocal
  }
}

__global__ void gap_backward_kernel(const float* __restrict__ dy, float* __restrict__ dx, int64_t total, int hw) {
  const float inv = 1.f / static_cast<float>(hw);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x)
    dx[i] = dy[i / hw] * inv;
}

void maxpool2d_forward(OpCachePtr& cache, const PoolShape& sh, const Tensor& x, Tensor& y) {
  PoolCache& pc = prepare(cache, sh);
  HT_CUDNN_CHECK(cudnnPoolingForward(ctx().cudnn, pc.pool, Scalars::one(), pc.x.get(), x.raw(), Scalars::zero(),
                                     pc.y.get(), y.raw()));
}

void maxpool2d_backward(OpCachePtr& cache, const PoolShape& sh, const Tensor& x, const Tensor& y, const Tensor& dy,
                        Tensor& dx) {
  const int64_t ny = int64_t{sh.n} * sh.c * sh.p() * sh.q();
  PoolCache& pc = prepare(cache, sh);
  HT_CUDNN_CHECK(cudnnPoolingBackward(ctx().cudnn, pc.pool, Scalars::one(), pc.y.get(), y.raw(), pc.y.get(), dy.raw(),
                                      pc.x.get(), x.raw(), Scalars::zero(), pc.x.get(), dx.raw()));
}

void global_avgpool_forward(OpCachePtr&, const Tensor& x, Tensor& y) {
  const int64_t planes = x.dim(0) * x.dim(1);
  const int hw = static_cast<int>(x.dim(2) * x.dim(3));
  gap_forward_kernel<<<blocks_for(planes), kThreads, 0, ctx().compute>>>(static_cast<const float*>(x.raw()),
                                                                         static_cast<float*>(y.raw()), planes, hw);
  HT_KERNEL_CHECK();
}

void global_avgpool_backward(OpCachePtr&, const Tensor& dy, Tensor& dx) {
  const int64_t planes = dx.dim(0) * dx.dim(1);
  const int hw = static_cast<int>(dx.dim(2) * dx.dim(3));
  const int64_t total = planes * hw;
  gap_backward_kernel<<<blocks_for(total), kThreads, 0, ctx().compute>>>(static_cast<const float*>(dy.raw()),
                                                                         static_cast<float*>(dx.raw()), total, hw);
  HT_KERNEL_CHECK();
}

}  // namespace

HT_DEFINE_POOL_HALF();

}  // namespace ht::cuda
