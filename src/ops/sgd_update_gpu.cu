// SGD update kernel: the same sgd_update_elem the CPU loop runs (src/ops/sgd_update.hpp).
#include "cuda/check.hpp"
#include "cuda/cuda_context.hpp"
#include "src/ops/sgd_update.hpp"

#include <algorithm>

namespace ht {
using namespace ht::cuda;  // the GPU runtime: ctx(), options(), workspaces

namespace {
__global__ void sgd_kernel(float* p, const float* g, float* buf, int64_t n, float lr, float momentum, float wd,
                           bool nesterov) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    sgd_update_elem(p[i], g[i], buf[i], lr, momentum, wd, nesterov);
}

}  // namespace

// The GPU half: the functions declared in src/ops/sgd_update.hpp.
void sgd_update_gpu(float* p, const float* g, float* buf, int64_t n, float lr, float momentum, float wd, bool nesterov) {
  if (n == 0) return;
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>((n + threads - 1) / threads, 4096);
  sgd_kernel<<<static_cast<unsigned>(blocks), threads, 0, ctx().compute>>>(p, g, buf, n, lr, momentum, wd, nesterov);
  HT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ht
