// Dtype and layout conversions on the GPU (src/ops/convert_gpu.hpp): grid-stride kernels over the
// load_f/store_f of src/ops/lowp_gpu.cuh (base/bf16.hpp's rounding).
#include "src/ops/gpu_common.cuh"
#include "src/ops/convert.hpp"
#include "src/ops/convert_gpu.hpp"
#include "src/ops/lowp_gpu.cuh"

namespace ht::cuda {
namespace {

template <class S, class D>
__global__ void convert_kernel(const S* __restrict__ src, D* __restrict__ dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    store_f(dst, i, load_f(src, i));
}

// One thread per destination element (coalesced writes); to_nhwc picks the direction.
template <class S, class D>
__global__ void layout_kernel(const S* __restrict__ src, D* __restrict__ dst, int64_t total, int c, int hw,
                              bool to_nhwc) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    int64_t from;
    if (to_nhwc) {  // i = (n*hw + j)*c + ch
      const int64_t ch = i % c, j = (i / c) % hw, img = i / (int64_t{c} * hw);
      from = (img * c + ch) * hw + j;
    } else {  // i = (n*c + ch)*hw + j
      const int64_t j = i % hw, ch = (i / hw) % c, img = i / (int64_t{c} * hw);
      from = (img * hw + j) * c + ch;
    }
    store_f(dst, i, load_f(src, from));
  }
}

void check_pair(const char* op, const Tensor& src, const Tensor& dst, int64_t want) {
  if (src.device() != Device::cuda || dst.device() != Device::cuda)
    throw RuntimeError(std::string(op) + ": both tensors must be on the GPU (src " + device_name(src.device()) +
                       ", dst " + device_name(dst.device()) + ")");
  if (src.numel() != want || dst.numel() != want)
    throw RuntimeError(std::string(op) + ": src holds " + std::to_string(src.numel()) + " elements and dst " +
                       std::to_string(dst.numel()) + ", expected " + std::to_string(want));
}

void layout(const char* op, const Tensor& src, Tensor& dst, int n, int c, int h, int w, bool to_nhwc) {
  const int64_t total = int64_t{n} * c * h * w;
  check_pair(op, src, dst, total);
  if (total == 0) return;
  with_typed2(src, dst, op, [&](auto* s, auto* d) {
    layout_kernel<<<blocks_for(total), kThreads, 0, ctx().compute>>>(s, d, total, c, h * w, to_nhwc);
  });
  HT_KERNEL_CHECK();
}

}  // namespace

void convert_elements(const Tensor& src, Tensor& dst) {
  check_pair("convert", src, dst, src.numel());
  const int64_t n = src.numel();
  if (n == 0) return;
  with_typed2(src, dst, "convert", [&](auto* s, auto* d) {
    convert_kernel<<<blocks_for(n), kThreads, 0, ctx().compute>>>(s, d, n);
  });
  HT_KERNEL_CHECK();
}

void nchw_to_nhwc(const Tensor& src, Tensor& dst, int n, int c, int h, int w) {
  layout("nchw_to_nhwc", src, dst, n, c, h, w, true);
}

void nhwc_to_nchw(const Tensor& src, Tensor& dst, int n, int c, int h, int w) {
  layout("nhwc_to_nchw", src, dst, n, c, h, w, false);
}

void convert_any(const Tensor& src, Tensor& dst) {
  const bool from_nhwc = act_format(src).nhwc, to_nhwc = act_format(dst).nhwc;
  if (from_nhwc && !to_nhwc) {
    nhwc_to_nchw(src, dst, static_cast<int>(src.dim(0)), static_cast<int>(src.dim(1)), static_cast<int>(src.dim(2)),
                 static_cast<int>(src.dim(3)));
  } else if (to_nhwc && !from_nhwc) {
    nchw_to_nhwc(src, dst, static_cast<int>(dst.dim(0)), static_cast<int>(dst.dim(1)), static_cast<int>(dst.dim(2)),
                 static_cast<int>(dst.dim(3)));
  } else {
    convert_elements(src, dst);
  }
}

}  // namespace ht::cuda

namespace ht {

// The GPU half declared in src/ops/convert.hpp.
void convert_tensor_gpu(const Tensor& src, Tensor& dst) { cuda::convert_any(src, dst); }

}  // namespace ht
