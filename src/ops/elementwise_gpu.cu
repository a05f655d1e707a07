// Element-wise ops on the GPU: grid-stride kernels over the HT_HD math of src/ops/elementwise.hpp
// (the same functions the CPU loops run), in float32, bfloat16 or float16 storage: each element is
// loaded as float, computed in float by the shared math and rounded once on the store
// (src/ops/lowp_gpu.cuh, the rounding of base/bf16.hpp), as the CPU loops do. count_nonfinite reduces
// per block, then one atomicAdd per block into a device counter that is copied back (it
// synchronises the compute stream: the trainer needs the count on the host to decide whether to
// skip the step).
#include <type_traits>

#include "src/ops/gpu_common.cuh"
#include "src/ops/lowp_gpu.cuh"
#include "src/ops/elementwise.hpp"

namespace ht {
using namespace ht::cuda;  // the GPU runtime: ctx(), options(), workspaces
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

// The element functions, as functors over storage type T (the raw device pointers travel by value
// into the kernel).
template <class T>
struct ReluFwd {
  const T* x;
  T* y;
  __device__ void operator()(int64_t i) const { store_f(y, i, relu_fwd(load_f(x, i))); }
};
template <class T>
struct ReluBwd {
  const T *y, *dy;
  T* dx;
  __device__ void operator()(int64_t i) const { store_f(dx, i, relu_bwd(load_f(y, i), load_f(dy, i))); }
};
template <class T>
struct Add {
  const T *a, *b;
  T* y;
  __device__ void operator()(int64_t i) const { store_f(y, i, load_f(a, i) + load_f(b, i)); }
};
template <class T, class X>
struct AddInplace {
  T* y;
  const X* x;
  __device__ void operator()(int64_t i) const { store_f(y, i, load_f(y, i) + load_f(x, i)); }
};
template <class T>
struct Scale {
  T* y;
  float s;
  __device__ void operator()(int64_t i) const { store_f(y, i, load_f(y, i) * s); }
};

template <class T>
__global__ void nonfinite_kernel(const T* x, int64_t n, unsigned long long* count) {
  __shared__ unsigned long long sm[kThreads];
  unsigned long long c = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    c += is_nonfinite(load_f(x, i)) ? 1ull : 0ull;  // widening keeps NaN and infinity
  sm[threadIdx.x] = c;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sm[threadIdx.x] += sm[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0 && sm[0] > 0) atomicAdd(count, sm[0]);
}

/// `t`'s data typed as `like` (the tensors of one call share `first`'s dtype; checked).
template <class T>
T* same(const Tensor& t, const T*, const char* op, const Tensor& first) {
  if (t.dtype() != first.dtype())
    throw RuntimeError(std::string(op) + ": dtype " + dtype_name(t.dtype()) + " differs from " +
                       dtype_name(first.dtype()));
  return static_cast<T*>(t.raw());
}

template <class P>
using elem_t = std::remove_pointer_t<P>;

}  // namespace

// The GPU half: the functions declared in src/ops/elementwise.hpp.
void relu_forward_gpu(const Tensor& x, Tensor& y) {
  with_typed(x, "relu_forward", [&](auto* xp) {
    launch_map(ReluFwd<elem_t<decltype(xp)>>{xp, same(y, xp, "relu_forward", x)}, x.numel());
  });
}

void relu_backward_gpu(const Tensor& y, const Tensor& dy, Tensor& dx) {
  with_typed(y, "relu_backward", [&](auto* yp) {
    launch_map(ReluBwd<elem_t<decltype(yp)>>{yp, same(dy, yp, "relu_backward", y), same(dx, yp, "relu_backward", y)},
               y.numel());
  });
}

void add_forward_gpu(const Tensor& a, const Tensor& b, Tensor& y) {
  with_typed(a, "add_forward", [&](auto* ap) {
    launch_map(Add<elem_t<decltype(ap)>>{ap, same(b, ap, "add_forward", a), same(y, ap, "add_forward", a)}, a.numel());
  });
}

// y and x may differ in dtype (e.g. a low-precision gradient added into a float32 one).
void add_inplace_gpu(Tensor& y, const Tensor& x) {
  with_typed2(y, x, "add_inplace", [&](auto* yp, auto* xp) {
    launch_map(AddInplace<elem_t<decltype(yp)>, elem_t<decltype(xp)>>{yp, xp}, y.numel());
  });
}

void scale_inplace_gpu(Tensor& y, float s) {
  with_typed(y, "scale_inplace", [&](auto* yp) { launch_map(Scale<elem_t<decltype(yp)>>{yp, s}, y.numel()); });
}

int64_t count_nonfinite_gpu(const Tensor& x) {
  const int64_t n = x.numel();
  if (n == 0) return 0;
  Context& cx = ctx();
  Tensor counter = Tensor::zeros({1}, DType::f64, Device::cuda);  // 8 bytes, used as an unsigned counter
  auto* cnt = static_cast<unsigned long long*>(counter.raw());
  const unsigned blocks = std::min<unsigned>(blocks_for(n), 1024);
  with_typed(x, "count_nonfinite", [&](auto* xp) { nonfinite_kernel<<<blocks, kThreads, 0, cx.compute>>>(xp, n, cnt); });
  HT_KERNEL_CHECK();
  unsigned long long host = 0;
  HT_CUDA_CHECK(cudaMemcpyAsync(&host, cnt, sizeof(host), cudaMemcpyDeviceToHost, cx.compute));
  HT_CUDA_CHECK(cudaStreamSynchronize(cx.compute));
  return static_cast<int64_t>(host);
}

}  // namespace ht
