// Element-wise ops on the GPU: grid-stride kernels over the HT_HD math of src/ops/elementwise.hpp
// (the same functions the CPU loops run). count_nonfinite reduces per block, then one atomicAdd per
// block into a device counter that is copied back (it synchronises the compute stream: the trainer
// needs the count on the host to decide whether to skip the step).
#include "cuda/common.cuh"
#include "src/base/op_halves.hpp"
#include "src/base/op_math.hpp"

namespace ht::cuda {
namespace {

/// Grid-stride loop running op(i) for every i in [0, n).
template <class Op>
__global__ void map_kernel(Op op, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) op(i);
}

/// Launches map_kernel on the compute stream (nothing when n == 0) and checks the launch.
template <class Op>
void launch_map(Op op, int64_t n) {
  if (n == 0) return;
  map_kernel<<<blocks_for(n), kThreads, 0, ctx().compute>>>(op, n);
  HT_KERNEL_CHECK();
}

// The element functions, as functors (the raw device pointers travel by value into the kernel).
struct ReluFwd {
  const float* x;
  float* y;
  __device__ void operator()(int64_t i) const { y[i] = relu_fwd(x[i]); }
};
struct ReluBwd {
  const float *y, *dy;
  float* dx;
  __device__ void operator()(int64_t i) const { dx[i] = relu_bwd(y[i], dy[i]); }
};
struct Add {
  const float *a, *b;
  float* y;
  __device__ void operator()(int64_t i) const { y[i] = a[i] + b[i]; }
};
struct AddInplace {
  float* y;
  const float* x;
  __device__ void operator()(int64_t i) const { y[i] += x[i]; }
};
struct Scale {
  float* y;
  float s;
  __device__ void operator()(int64_t i) const { y[i] *= s; }
};

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

const float* in(const Tensor& t) { return static_cast<const float*>(t.raw()); }
float* out(Tensor& t) { return static_cast<float*>(t.raw()); }

void relu_forward(const Tensor& x, Tensor& y) { launch_map(ReluFwd{in(x), out(y)}, x.numel()); }

void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  launch_map(ReluBwd{in(y), in(dy), out(dx)}, y.numel());
}

void add_forward(const Tensor& a, const Tensor& b, Tensor& y) { launch_map(Add{in(a), in(b), out(y)}, a.numel()); }

void add_inplace(Tensor& y, const Tensor& x) { launch_map(AddInplace{out(y), in(x)}, y.numel()); }

void scale_inplace(Tensor& y, float s) { launch_map(Scale{out(y), s}, y.numel()); }

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

HT_DEFINE_ELEMENTWISE_HALF();

}  // namespace ht::cuda
