// Own kernels of the convolution (see src/ops/conv2d_gpu_kernels.cuh).
#include "src/ops/conv2d_gpu_kernels.cuh"
#include "src/ops/lowp_gpu.cuh"

namespace ht::cuda {
namespace {

/// The offset of filter element (k, c, r, s) in KCRS or KRSC order.
__device__ __forceinline__ int64_t filter_at(int64_t k, int64_t c, int64_t r, int64_t s, int C, int R, int S,
                                             bool krsc) {
  return krsc ? ((k * R + r) * S + s) * C + c : ((k * C + c) * R + r) * S + s;
}

// One thread per filter element, indexed in KCRS order (the master's).
template <class T>
__global__ void filter_to_lowp_kernel(const float* __restrict__ w, T* __restrict__ out, int64_t total, int C, int R,
                                      int S, bool krsc) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t s = i % S, r = (i / S) % R, c = (i / (int64_t{S} * R)) % C, k = i / (int64_t{S} * R * C);
    store_f(out, filter_at(k, c, r, s, C, R, S, krsc), w[i]);
  }
}

template <class T>
__global__ void filter_grad_kernel(const T* __restrict__ in, float* __restrict__ dw, int64_t total, int C, int R, int S,
                                   bool krsc, bool accumulate) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t s = i % S, r = (i / S) % R, c = (i / (int64_t{S} * R)) % C, k = i / (int64_t{S} * R * C);
    const float g = load_f(in, filter_at(k, c, r, s, C, R, S, krsc));
    dw[i] = accumulate ? dw[i] + g : g;
  }
}

template <class T>
__global__ void bias_add_kernel(T* __restrict__ y, const float* __restrict__ b, int64_t total, int k, int pq,
                                bool nhwc) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int ch = nhwc ? static_cast<int>(i % k) : static_cast<int>((i / pq) % k);
    store_f(y, i, load_f(y, i) + b[ch]);
  }
}

// NCHW: one block per channel, a fixed-order tree reduction over its N*P*Q values.
template <class T>
__global__ void bias_grad_nchw_kernel(const T* __restrict__ dy, float* __restrict__ db, int n, int k, int pq,
                                      bool accumulate) {
  __shared__ float sm[kThreads];
  const int ch = blockIdx.x;
  float acc = 0.f;
  const int64_t total = int64_t{n} * pq;
  for (int64_t i = threadIdx.x; i < total; i += blockDim.x) {
    const int64_t img = i / pq, off = i % pq;
    acc += load_f(dy, (img * k + ch) * pq + off);
  }
  sm[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sm[threadIdx.x] += sm[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) db[ch] = accumulate ? db[ch] + sm[0] : sm[0];
}

// NHWC, pass 1: block (x, y) sums channels [32x, 32x + 32) over row chunk y (a row is one (n, p, q)),
// threads reading 32 consecutive channels of a row (coalesced); partial[y * k + ch].
constexpr int kRowsPerBlockY = 8;
template <class T>
__global__ void bias_grad_nhwc_partial(const T* __restrict__ dy, float* __restrict__ partial, int64_t rows, int k,
                                       int64_t chunk) {
  __shared__ float sm[kRowsPerBlockY][32];
  const int ch = blockIdx.x * 32 + threadIdx.x;
  const int64_t begin = blockIdx.y * chunk, end = min(rows, begin + chunk);
  float acc = 0.f;
  if (ch < k)
    for (int64_t r = begin + threadIdx.y; r < end; r += kRowsPerBlockY) acc += load_f(dy, r * k + ch);
  sm[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && ch < k) {
    float s = 0.f;
    for (int j = 0; j < kRowsPerBlockY; ++j) s += sm[j][threadIdx.x];
    partial[blockIdx.y * int64_t{k} + ch] = s;
  }
}

// NHWC, pass 2: db[ch] (+)= the chunks' partial sums in chunk order.
__global__ void bias_grad_nhwc_final(const float* __restrict__ partial, float* __restrict__ db, int chunks, int k,
                                     bool accumulate) {
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= k) return;
  float s = 0.f;
  for (int j = 0; j < chunks; ++j) s += partial[int64_t{j} * k + ch];
  db[ch] = accumulate ? db[ch] + s : s;
}

template <class F>
void with_lowp(DType dtype, const void* p, F&& f) {
  if (dtype == DType::bf16) f(static_cast<bf16*>(const_cast<void*>(p)));
  else if (dtype == DType::f16) f(static_cast<f16*>(const_cast<void*>(p)));
  else throw RuntimeError(std::string("conv2d: ") + dtype_name(dtype) + " is not a low-precision dtype");
}

}  // namespace

void conv_filter_to_lowp(const float* w, void* w_lp, DType dtype, const Conv2dShape& sh, bool krsc) {
  const int64_t total = int64_t{sh.k} * sh.c * sh.r * sh.s;
  with_lowp(dtype, w_lp, [&](auto* out) {
    filter_to_lowp_kernel<<<blocks_for(total), kThreads, 0, ctx().compute>>>(w, out, total, sh.c, sh.r, sh.s, krsc);
  });
  HT_KERNEL_CHECK();
}

void conv_filter_grad_from_lowp(const void* dw_lp, DType dtype, float* dw, const Conv2dShape& sh, bool krsc,
                                bool accumulate) {
  const int64_t total = int64_t{sh.k} * sh.c * sh.r * sh.s;
  with_lowp(dtype, dw_lp, [&](auto* in) {
    filter_grad_kernel<<<blocks_for(total), kThreads, 0, ctx().compute>>>(in, dw, total, sh.c, sh.r, sh.s, krsc,
                                                                          accumulate);
  });
  HT_KERNEL_CHECK();
}

void conv_bias_add(Tensor& y, const float* b, const Conv2dShape& sh, ActFormat f) {
  const int64_t total = y.numel();
  with_typed(y, "conv2d_forward", [&](auto* yp) {
    bias_add_kernel<<<blocks_for(total), kThreads, 0, ctx().compute>>>(yp, b, total, sh.k, sh.p() * sh.q(), f.nhwc);
  });
  HT_KERNEL_CHECK();
}

void conv_bias_grad(const Tensor& dy, float* db, const Conv2dShape& sh, ActFormat f, bool accumulate) {
  Context& cx = ctx();
  const int pq = sh.p() * sh.q();
  if (!f.nhwc) {
    with_typed(dy, "conv2d_backward", [&](auto* p) {
      bias_grad_nchw_kernel<<<sh.k, kThreads, 0, cx.compute>>>(p, db, sh.n, sh.k, pq, accumulate);
    });
    HT_KERNEL_CHECK();
    return;
  }
  // The chunking depends on the shape only, so the summation order (and the result) is the same
  // every run.
  const int64_t rows = int64_t{sh.n} * pq;
  const int64_t chunks = std::min<int64_t>(std::max<int64_t>((rows + 255) / 256, 1), 256);
  const int64_t chunk = (rows + chunks - 1) / chunks;
  Tensor partial = Tensor::empty({chunks, sh.k}, DType::f32, Device::cuda);
  const dim3 grid(static_cast<unsigned>((sh.k + 31) / 32), static_cast<unsigned>(chunks));
  with_typed(dy, "conv2d_backward", [&](auto* p) {
    bias_grad_nhwc_partial<<<grid, dim3(32, kRowsPerBlockY), 0, cx.compute>>>(p, static_cast<float*>(partial.raw()),
                                                                            rows, sh.k, chunk);
  });
  HT_KERNEL_CHECK();
  bias_grad_nhwc_final<<<(sh.k + kThreads - 1) / kThreads, kThreads, 0, cx.compute>>>(
      static_cast<const float*>(partial.raw()), db, static_cast<int>(chunks), sh.k, accumulate);
  HT_KERNEL_CHECK();
}

}  // namespace ht::cuda
