// Softmax cross-entropy on the GPU, one warp per row, with the HT_HD math of
// src/ops/softmax_xent.hpp (xent_row_loss, xent_target, xent_grad) shared with the CPU path.
// Forward writes each row's loss (double) and top-1 hit; the host copies them back and sums in row
// order, so the mean loss is deterministic and summed in the same order as the CPU's serial loop.
// A label outside [0, K) is reported (row and value) as RuntimeError, like the CPU implementation.
#include <vector>

#include "src/ops/gpu_common.cuh"
#include "src/ops/softmax_xent.hpp"

namespace ht {
using namespace ht::cuda;  // the GPU runtime: ctx(), options(), workspaces
namespace {

constexpr unsigned kFull = 0xffffffffu;

__global__ void xent_fwd_kernel(const float* __restrict__ z, const int32_t* __restrict__ lab, float* __restrict__ p,
                                double* __restrict__ row_loss, int32_t* __restrict__ row_hit, int32_t* bad_row,
                                int64_t n, int k, float eps) {
  const int lane = threadIdx.x & 31;
  const int64_t row = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) >> 5;
  if (row >= n) return;  // uniform across the warp: blockDim is a multiple of 32
  const float* zr = z + row * k;
  float* pr = p + row * k;
  // Maximum and its first index (torch.argmax): each lane scans its strided subsequence, then the
  // warp keeps the larger value, on ties the smaller index.
  float m = 0.f;
  int arg = k;
  for (int j = lane; j < k; j += 32)
    if (arg == k || zr[j] > m) {
      m = zr[j];
      arg = j;
    }
  for (int off = 16; off > 0; off >>= 1) {
    const float om = __shfl_xor_sync(kFull, m, off);
    const int oa = __shfl_xor_sync(kFull, arg, off);
    if (oa != k && (arg == k || om > m || (om == m && oa < arg))) {
      m = om;
      arg = oa;
    }
  }
  double s = 0, sum_z = 0;
  for (int j = lane; j < k; j += 32) {
    const float e = expf(zr[j] - m);
    pr[j] = e;
    s += e;
    sum_z += zr[j];
  }
  for (int off = 16; off > 0; off >>= 1) {
    s += __shfl_xor_sync(kFull, s, off);
    sum_z += __shfl_xor_sync(kFull, sum_z, off);
  }
  const float inv = static_cast<float>(1.0 / s);
  for (int j = lane; j < k; j += 32) pr[j] *= inv;
  if (lane == 0) {
    const int label = lab[row];
    if (label < 0 || label >= k) {
      atomicCAS(bad_row, 0, static_cast<int32_t>(row + 1));
      row_loss[row] = 0;
      row_hit[row] = 0;
    } else {
      const double lse = static_cast<double>(m) + log(s);
      row_loss[row] = xent_row_loss(lse, zr[label], sum_z, eps, k);
      row_hit[row] = arg == label ? 1 : 0;
    }
  }
}

__global__ void xent_bwd_kernel(const float* p, const int32_t* __restrict__ lab, float* d, int64_t total, int k,
                                float eps, float s_over_n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = i / k;
    const int j = static_cast<int>(i % k);
    d[i] = xent_grad(p[i], xent_target(j, lab[row], eps, k), s_over_n);  // d may alias p (read first)
  }
}

}  // namespace

// The GPU half: the functions declared in src/ops/softmax_xent.hpp.
double softmax_xent_forward_gpu(const Tensor& logits, const Tensor& labels, float label_smoothing, Tensor& probs,
                            int64_t* correct) {
  const char* op = "softmax_xent_forward";
  const int64_t n = logits.dim(0);
  const int k = static_cast<int>(logits.dim(1));
  Context& cx = ctx();
  Tensor loss = Tensor::empty({n}, DType::f64, Device::cuda);
  Tensor hit = Tensor::empty({n + 1}, DType::i32, Device::cuda);  // [0, n): hits; [n]: first bad row + 1
  auto* hitp = static_cast<int32_t*>(hit.raw());
  HT_CUDA_CHECK(cudaMemsetAsync(hitp + n, 0, sizeof(int32_t), cx.compute));
  const int rows_per_block = kThreads / 32;
  const int64_t blocks = (n + rows_per_block - 1) / rows_per_block;
  xent_fwd_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, cx.compute>>>(
      static_cast<const float*>(logits.raw()), static_cast<const int32_t*>(labels.raw()),
      static_cast<float*>(probs.raw()), static_cast<double*>(loss.raw()), hitp, hitp + n, n, k, label_smoothing);
  HT_KERNEL_CHECK();
  std::vector<double> h_loss(static_cast<size_t>(n));
  std::vector<int32_t> h_hit(static_cast<size_t>(n + 1));
  HT_CUDA_CHECK(cudaMemcpyAsync(h_loss.data(), loss.raw(), sizeof(double) * n, cudaMemcpyDeviceToHost, cx.compute));
  HT_CUDA_CHECK(cudaMemcpyAsync(h_hit.data(), hitp, sizeof(int32_t) * (n + 1), cudaMemcpyDeviceToHost, cx.compute));
  HT_CUDA_CHECK(cudaStreamSynchronize(cx.compute));
  if (h_hit[n] != 0) {
    const int64_t row = h_hit[n] - 1;
    int32_t value = 0;
    // On the compute stream (not the legacy default stream, which does not order with our
    // non-blocking streams).
    HT_CUDA_CHECK(cudaMemcpyAsync(&value, static_cast<const int32_t*>(labels.raw()) + row, sizeof(value),
                                  cudaMemcpyDeviceToHost, cx.compute));
    HT_CUDA_CHECK(cudaStreamSynchronize(cx.compute));
    throw RuntimeError(std::string(op) + ": label " + std::to_string(value) + " of row " + std::to_string(row) +
                       " is outside [0, " + std::to_string(k) + ")");
  }
  double sum = 0;
  int64_t right = 0;
  for (int64_t i = 0; i < n; ++i) {
    sum += h_loss[i];
    right += h_hit[i];
  }
  if (correct) *correct = right;
  return sum / static_cast<double>(n);
}

void softmax_xent_backward_gpu(const Tensor& probs, const Tensor& labels, float label_smoothing, float scale,
                           Tensor& dlogits) {
  const int64_t n = probs.dim(0);
  const int k = static_cast<int>(probs.dim(1));
  const float s_over_n = static_cast<float>(static_cast<double>(scale) / static_cast<double>(n));
  const int64_t total = n * k;
  xent_bwd_kernel<<<blocks_for(total), kThreads, 0, ctx().compute>>>(
      static_cast<const float*>(probs.raw()), static_cast<const int32_t*>(labels.raw()),
      static_cast<float*>(dlogits.raw()), total, k, label_smoothing, s_over_n);
  HT_KERNEL_CHECK();
}

}  // namespace ht
