// Pooling. Max pool through cuDNN (CUDNN_POOLING_MAX_DETERMINISTIC: backward routes each window's
// gradient to its arg-max, deterministically). Padding must act as -inf (PyTorch); the GPU test
// checks pad 1 with negative inputs against the CPU implementation.
// Global average pool through own kernels: one thread per (n, c) plane for the forward (a plane is
// H*W <= a few hundred elements in the models here), one per element for the backward.
// Every activation format (src/ops/gpu_common.cuh): bfloat16/float16 NHWC through the same cuDNN pooling
// (float scaling factors) and the same kernels typed by the tensors' dtypes, summing in float32.
#include "src/ops/gpu_common.cuh"
#include "src/ops/lowp_gpu.cuh"
#include "src/ops/pool.hpp"

namespace ht {
using namespace ht::cuda;  // the GPU runtime: ctx(), options(), workspaces
namespace {

struct PoolCache : OpCache {
  bool valid = false;
  PoolShape sh;
  ActFormat fmt;
  TensorDesc x, y;
  cudnnPoolingDescriptor_t pool = nullptr;
  PoolCache() { HT_CUDNN_CHECK(cudnnCreatePoolingDescriptor(&pool)); }
  ~PoolCache() override { cudnnDestroyPoolingDescriptor(pool); }
};

PoolCache& prepare(OpCachePtr& slot, const PoolShape& sh, ActFormat f) {
  PoolCache& pc = cache_as<PoolCache>(slot);
  if (pc.valid && pc.sh.n == sh.n && pc.sh.c == sh.c && pc.sh.h == sh.h && pc.sh.w == sh.w &&
      pc.sh.kernel == sh.kernel && pc.sh.stride == sh.stride && pc.sh.pad == sh.pad && pc.fmt == f)
    return pc;
  pc.x.set(sh.n, sh.c, sh.h, sh.w, f);
  pc.y.set(sh.n, sh.c, sh.p(), sh.q(), f);
  pc.fmt = f;
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

// y[n, c] = mean of plane (n, c); i = n*C + c. NCHW: the plane is contiguous; NHWC: its elements are
// C apart (adjacent threads read adjacent channels: coalesced).
template <class X, class Y>
__global__ void gap_forward_kernel(const X* __restrict__ x, Y* __restrict__ y, int64_t planes, int c, int hw,
                                   bool nhwc) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < planes; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t base = nhwc ? (i / c) * hw * int64_t{c} + i % c : i * hw;
    const int64_t step = nhwc ? c : 1;
    float s = 0.f;
    for (int j = 0; j < hw; ++j) s += load_f(x, base + j * step);
    store_f(y, i, s * (1.f / static_cast<float>(hw)));  // as the CPU: sum times the reciprocal
  }
}

template <class DY, class DX>
__global__ void gap_backward_kernel(const DY* __restrict__ dy, DX* __restrict__ dx, int64_t total, int c, int hw,
                                    bool nhwc) {
  const float inv = 1.f / static_cast<float>(hw);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t plane = nhwc ? (i / (int64_t{hw} * c)) * c + i % c : i / hw;
    store_f(dx, i, load_f(dy, plane) * inv);
  }
}

}  // namespace

// The GPU half: the functions declared in src/ops/pool.hpp.
void maxpool2d_forward_gpu(OpCachePtr& cache, const PoolShape& sh, const Tensor& x, Tensor& y) {
  PoolCache& pc = prepare(cache, sh, act_format(x));
  HT_CUDNN_CHECK(cudnnPoolingForward(ctx().cudnn, pc.pool, Scalars::one(), pc.x.get(), x.raw(), Scalars::zero(),
                                     pc.y.get(), y.raw()));
}

void maxpool2d_backward_gpu(OpCachePtr& cache, const PoolShape& sh, const Tensor& x, const Tensor& y, const Tensor& dy,
                        Tensor& dx) {
  const int64_t ny = int64_t{sh.n} * sh.c * sh.p() * sh.q();
  PoolCache& pc = prepare(cache, sh, act_format(x));
  HT_CUDNN_CHECK(cudnnPoolingBackward(ctx().cudnn, pc.pool, Scalars::one(), pc.y.get(), y.raw(), pc.y.get(), dy.raw(),
                                      pc.x.get(), x.raw(), Scalars::zero(), pc.x.get(), dx.raw()));
}

void global_avgpool_forward_gpu(OpCachePtr&, const Tensor& x, Tensor& y) {
  const int64_t planes = x.dim(0) * x.dim(1);
  const int c = static_cast<int>(x.dim(1)), hw = static_cast<int>(x.dim(2) * x.dim(3));
  const bool nhwc = act_format(x).nhwc;
  with_typed2(x, y, "global_avgpool_forward", [&](auto* xp, auto* yp) {
    gap_forward_kernel<<<blocks_for(planes), kThreads, 0, ctx().compute>>>(xp, yp, planes, c, hw, nhwc);
  });
  HT_KERNEL_CHECK();
}

void global_avgpool_backward_gpu(OpCachePtr&, const Tensor& dy, Tensor& dx) {
  const int64_t planes = dx.dim(0) * dx.dim(1);
  const int c = static_cast<int>(dx.dim(1)), hw = static_cast<int>(dx.dim(2) * dx.dim(3));
  const int64_t total = planes * hw;
  const bool nhwc = act_format(dx).nhwc;
  with_typed2(dy, dx, "global_avgpool_backward", [&](auto* dyp, auto* dxp) {
    gap_backward_kernel<<<blocks_for(total), kThreads, 0, ctx().compute>>>(dyp, dxp, total, c, hw, nhwc);
  });
  HT_KERNEL_CHECK();
}

}  // namespace ht
