// Element-wise ops on the GPU: grid-stride kernels over the HT_HD math of src/ops/elementwise.hpp
// (the same functions the CPU loops run). count_nonfinite reduces per block, then one atomicAdd per
// block into a device counter that is copied back (it synchronises the compute stream: the trainer
// needs the count on the host to decide whether to skip the step).
#include "cuda/common.cuh"
#include "src/base/op_halves.hpp"
#include "src/base/op_math.hpp"

namespace ht::cuda {
namespace {

__global__ void relu_fwd_kernel(const float* x, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    y[i] = relu_fwd(x[i]);
}
__global__ void relu_bwd_kernel(const float* y, const float* dy, float* dx, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    dx[i] = relu_bwd(y[i], dy[i]);
}
__global__ void add_kernel(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    y[i] = a[i] + b[i];
}
__global__ void add_inplace_kernel(float* y, const float* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    y[i] += x[i];
}
__global__ void scale_kernel(float* y, float s, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    y[i] *= s;
}
__global__ void nonfinite_kernel(const float* x, int64_t n, unsigned long long* count) {
  __shared__ unsigned long long sm[kThreads];
  unsigned long long c = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    c += is_nonfinite(x[i]) ? 1ull : 0ull;
  sm[threadIdx.x] = c;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sm[threadIdx.x] += sm[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0 && sm[0] > 0) atomicAdd(count, sm[0]);
}

void relu_forward(const Tensor& x, Tensor& y) {
  const int64_t n = x.numel();
  if (n == 0) return;
  relu_fwd_kernel<<<blocks_for(n), kThreads, 0, ctx().compute>>>(static_cast<const float*>(x.raw()),
                                                                 static_cast<float*>(y.raw()), n);
  HT_KERNEL_CHECK();
}

void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  const int64_t n = y.numel();
  if (n == 0) return;
  relu_bwd_kernel<<<blocks_for(n), kThreads, 0, ctx().compute>>>(
      static_cast<const float*>(y.raw()), static_cast<const float*>(dy.raw()), static_cast<float*>(dx.raw()), n);
  HT_KERNEL_CHECK();
}

void add_forward(const Tensor& a, const Tensor& b, Tensor& y) {
  const int64_t n = a.numel();
  if (n == 0) return;
  add_kernel<<<blocks_for(n), kThreads, 0, ctx().compute>>>(
      static_cast<const float*>(a.raw()), static_cast<const float*>(b.raw()), static_cast<float*>(y.raw()), n);
  HT_KERNEL_CHECK();
}

void add_inplace(Tensor& y, const Tensor& x) {
  const int64_t n = y.numel();
  if (n == 0) return;
  add_inplace_kernel<<<blocks_for(n), kThreads, 0, ctx().compute>>>(static_cast<float*>(y.raw()),
                                                                    static_cast<const float*>(x.raw()), n);
  HT_KERNEL_CHECK();
}

void scale_inplace(Tensor& y, float s) {
  const int64_t n = y.numel();
  if (n == 0) return;
  scale_kernel<<<blocks_for(n), kThreads, 0, ctx().compute>>>(static_cast<float*>(y.raw()), s, n);
  HT_KERNEL_CHECK();
}

int64_t count_nonfinite(const Tensor& x) {
  const int64_t n = x.numel();
  if (n == 0) return 0;
  Context& cx = ctx();
  Tensor counter = Tensor::zeros({1}, DType::f64, Device::cuda);  // 8 bytes, used as an unsigned counter
  auto* cnt = static_cast<unsigned long long*>(counter.raw());
  const unsigned blocks = std::min<unsigned>(blocks_for(n), 1024);
  nonfinite_kernel<<<blocks, kThreads, 0, cx.compute>>>(static_cast<const float*>(x.raw()), n, cnt);
  HT_KERNEL_CHECK();
  unsigned long long host = 0;
  HT_CUDA_CHECK(cudaMemcpyAsync(&host, cnt, sizeof(host), cudaMemcpyDeviceToHost, cx.compute));
  HT_CUDA_CHECK(cudaStreamSynchronize(cx.compute));
  return static_cast<int64_t>(host);
}

}  // namespace

const ElementwiseHalf elementwise = {.relu_forward = relu_forward,
                                     .relu_backward = relu_backward,
                                     .add_forward = add_forward,
                                     .add_inplace = add_inplace,
                                     .scale_inplace = scale_inplace,
                                     .count_nonfinite = count_nonfinite};

}  // namespace ht::cuda
