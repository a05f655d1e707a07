// 2-D convolution through cuDNN (legacy convolution API): forward, backward data, backward filter,
// plus own kernels for the bias gradient (a fixed-order reduction, deterministic by construction).
//
// Algorithm choice, once per (shape, options) in a process-wide table shared by all layers:
//  - default: cudnnFind*Algorithm (each algorithm timed on the device, as PyTorch's
//    cudnn.benchmark), fastest one whose workspace fits Options::workspace_bytes;
//  - deterministic: cudnnGet*Algorithm_v7 heuristics (no timing, so the same choice every run),
//    restricted to results reported CUDNN_DETERMINISTIC and never the algorithms cuDNN documents as
//    non-deterministic (backward data ALGO_0, backward filter ALGO_0 and ALGO_3).
// FP32 math is strict (CUDNN_FMA_MATH) unless Options::allow_tf32.
#include <cudnn.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <sstream>
#include <tuple>

#include "cuda/common.cuh"
#include "src/ops/conv2d.hpp"

namespace ht::cuda {
namespace {

struct AlgoKey {
  int n, c, h, w, k, r, s, stride, pad;
  size_t ws_cap;
  bool det, tf32;
  auto tie() const { return std::tie(n, c, h, w, k, r, s, stride, pad, ws_cap, det, tf32); }
  bool operator<(const AlgoKey& o) const { return tie() < o.tie(); }
};

struct Algos {
  bool have_fwd = false, have_bwd = false;
  cudnnConvolutionFwdAlgo_t fwd{};
  size_t fwd_ws = 0;
  cudnnConvolutionBwdDataAlgo_t bwd_data{};
  size_t bwd_data_ws = 0;
  cudnnConvolutionBwdFilterAlgo_t bwd_filter{};
  size_t bwd_filter_ws = 0;
};

std::mutex g_algo_mu;
std::map<AlgoKey, Algos> g_algos;

std::string shape_text(const Conv2dShape& sh) {
  std::ostringstream os;
  os << "x [" << sh.n << "," << sh.c << "," << sh.h << "," << sh.w << "], w [" << sh.k << "," << sh.c << "," << sh.r
     << "," << sh.s << "], stride " << sh.stride << ", pad " << sh.pad;
  return os.str();
}

/// Descriptors for one shape, owned by the layer's cache slot.
struct ConvCache : OpCache {
  bool valid = false;
  Conv2dShape sh;
  TensorDesc x, y, bias;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  bool tf32 = false;
  ConvCache() {
    HT_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w));
    HT_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv));
  }
  ~ConvCache() override {
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyConvolutionDescriptor(conv);
  }
};

bool same_shape(const Conv2dShape& a, const Conv2dShape& b) {
  return a.n == b.n && a.c == b.c && a.h == b.h && a.w == b.w && a.k == b.k && a.r == b.r && a.s == b.s &&
         a.stride == b.stride && a.pad == b.pad;
}

ConvCache& prepare(OpCachePtr& slot, const Conv2dShape& sh, const Options& opt) {
  ConvCache& cc = cache_as<ConvCache>(slot);
  if (cc.valid && same_shape(cc.sh, sh) && cc.tf32 == opt.allow_tf32) return cc;
  cc.valid = false;
  cc.x.set(sh.n, sh.c, sh.h, sh.w);
  cc.y.set(sh.n, sh.k, sh.p(), sh.q());
  cc.bias.set(1, sh.k, 1, 1);
  HT_CUDNN_CHECK(cudnnSetFilter4dDescriptor(cc.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, sh.k, sh.c, sh.r, sh.s));
  HT_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(cc.conv, sh.pad, sh.pad, sh.stride, sh.stride, 1, 1,
                                                 CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  HT_CUDNN_CHECK(cudnnSetConvolutionMathType(cc.conv, opt.allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));
  int n = 0, c = 0, h = 0, w = 0;
  HT_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(cc.conv, cc.x.get(), cc.w, &n, &c, &h, &w));
  if (n != sh.n || c != sh.k || h != sh.p() || w != sh.q())
    throw RuntimeError("conv2d: cuDNN output shape [" + std::to_string(n) + "," + std::to_string(c) + "," +
                       std::to_string(h) + "," + std::to_string(w) + "] differs from the expected one for " +
                       shape_text(sh));
  cc.sh = sh;
  cc.tf32 = opt.allow_tf32;
  cc.valid = true;
  return cc;
}

// Math types that would run FP32 data through tensor cores with conversion: never chosen in strict
// FP32 mode.
bool math_ok(cudnnMathType_t m, bool tf32) {
  if (m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) return false;
  if (!tf32 && m == CUDNN_TENSOR_OP_MATH) return false;
  return true;
}

template <class Perf>
bool acceptable(const Perf& p, const Options& opt) {
  if (p.status != CUDNN_STATUS_SUCCESS) return false;
  if (p.memory > opt.workspace_bytes) return false;
  if (!math_ok(p.mathType, opt.allow_tf32)) return false;
  if (opt.deterministic && p.determinism != CUDNN_DETERMINISTIC) return false;
  return true;
}

[[noreturn]] void no_algo(const char* pass, const Conv2dShape& sh, const Options& opt) {
  std::ostringstream os;
  os << "conv2d: cuDNN offers no " << pass << " algorithm for " << shape_text(sh) << " within the workspace cap of "
     << (opt.workspace_bytes >> 20) << " MiB" << (opt.deterministic ? " among deterministic algorithms" : "")
     << "; raise --cuda.workspace_mb" << (opt.deterministic ? " or turn off --train.deterministic" : "");
  throw RuntimeError(os.str());
}

void choose_fwd(ConvCache& cc, const Options& opt, Algos& a) {
  Context& cx = ctx();
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int got = 0;
  if (opt.deterministic)
    HT_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(cx.cudnn, cc.x.get(), cc.w, cc.conv, cc.y.get(),
                                                          CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, perf));
  else
    HT_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithm(cx.cudnn, cc.x.get(), cc.w, cc.conv, cc.y.get(),
                                                        CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, perf));
  for (int i = 0; i < got; ++i) {
    if (!acceptable(perf[i], opt)) continue;
    size_t ws = 0;
    if (cudnnGetConvolutionForwardWorkspaceSize(cx.cudnn, cc.x.get(), cc.w, cc.conv, cc.y.get(), perf[i].algo, &ws) !=
            CUDNN_STATUS_SUCCESS ||
        ws > opt.workspace_bytes)
      continue;
    a.fwd = perf[i].algo;
    a.fwd_ws = ws;
    a.have_fwd = true;
    return;
  }
  no_algo("forward", cc.sh, opt);
}

void choose_bwd(ConvCache& cc, const Options& opt, Algos& a) {
  Context& cx = ctx();
  {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int got = 0;
    if (opt.deterministic)
      HT_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(cx.cudnn, cc.w, cc.y.get(), cc.conv, cc.x.get(),
                                                                 CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, perf));
    else
      HT_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithm(cx.cudnn, cc.w, cc.y.get(), cc.conv, cc.x.get(),
                                                               CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, perf));
    bool found = false;
    for (int i = 0; i < got && !found; ++i) {
      if (!acceptable(perf[i], opt)) continue;
      if (opt.deterministic && perf[i].algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0) continue;
      size_t ws = 0;
      if (cudnnGetConvolutionBackwardDataWorkspaceSize(cx.cudnn, cc.w, cc.y.get(), cc.conv, cc.x.get(), perf[i].algo,
                                                       &ws) != CUDNN_STATUS_SUCCESS ||
          ws > opt.workspace_bytes)
        continue;
      a.bwd_data = perf[i].algo;
      a.bwd_data_ws = ws;
      found = true;
    }
    if (!found) no_algo("backward-data", cc.sh, opt);
  }
  {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int got = 0;
    if (opt.deterministic)
      HT_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(cx.cudnn, cc.x.get(), cc.y.get(), cc.conv, cc.w,
                                                                   CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got,
                                                                   perf));
    else
      HT_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithm(cx.cudnn, cc.x.get(), cc.y.get(), cc.conv, cc.w,
                                                                 CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, perf));
    bool found = false;
    for (int i = 0; i < got && !found; ++i) {
      if (!acceptable(perf[i], opt)) continue;
      if (opt.deterministic && (perf[i].algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 ||
                                perf[i].algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3))
        continue;
      size_t ws = 0;
      if (cudnnGetConvolutionBackwardFilterWorkspaceSize(cx.cudnn, cc.x.get(), cc.y.get(), cc.conv, cc.w,
                                                         perf[i].algo, &ws) != CUDNN_STATUS_SUCCESS ||
          ws > opt.workspace_bytes)
        continue;
      a.bwd_filter = perf[i].algo;
      a.bwd_filter_ws = ws;
      found = true;
    }
    if (!found) no_algo("backward-filter", cc.sh, opt);
  }
  a.have_bwd = true;
}

Algos algos_for(ConvCache& cc, const Options& opt, bool backward) {
  AlgoKey key{cc.sh.n, cc.sh.c, cc.sh.h, cc.sh.w, cc.sh.k, cc.sh.r, cc.sh.s, cc.sh.stride, cc.sh.pad,
              opt.workspace_bytes, opt.deterministic, opt.allow_tf32};
  std::lock_guard<std::mutex> lk(g_algo_mu);
  Algos& a = g_algos[key];
  if (!backward && !a.have_fwd) choose_fwd(cc, opt, a);
  if (backward && !a.have_bwd) choose_bwd(cc, opt, a);
  return a;
}

void check_args(const char* op, const Conv2dShape& sh, const Tensor& x, const Tensor& w) {
  op_check(sh.n > 0 && sh.c > 0 && sh.h > 0 && sh.w > 0 && sh.k > 0 && sh.r > 0 && sh.s > 0 && sh.stride > 0 &&
               sh.pad >= 0 && sh.p() > 0 && sh.q() > 0,
           op, "invalid shape " + shape_text(sh));
  check_dev_f32(x, op, "x");
  check_dev_f32(w, op, "w");
  check_numel(x, int64_t{sh.n} * sh.c * sh.h * sh.w, op, "x");
  check_numel(w, int64_t{sh.k} * sh.c * sh.r * sh.s, op, "w");
}

// db[k] (+)= sum over n, p, q of dy[n, k, p, q]: one block per channel, fixed-order tree reduction.
__global__ void bias_grad_kernel(const float* __restrict__ dy, float* __restrict__ db, int n, int k, int pq,
                                 bool accumulate) {
  __shared__ float sm[kThreads];
  const int ch = blockIdx.x;
  float acc = 0.f;
  const int64_t total = int64_t{n} * pq;
  for (int64_t i = threadIdx.x; i < total; i += blockDim.x) {
    const int64_t img = i / pq, off = i % pq;
    acc += dy[(img * k + ch) * pq + off];
  }
  sm[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sm[threadIdx.x] += sm[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) db[ch] = accumulate ? db[ch] + sm[0] : sm[0];
}

}  // namespace

void conv2d_forward(OpCachePtr& cache, const Conv2dShape& sh, const Tensor& x, const Tensor& w, const Tensor* b,
                    Tensor& y) {
  const char* op = "conv2d_forward";
  check_args(op, sh, x, w);
  check_dev_f32(y, op, "y");
  check_numel(y, int64_t{sh.n} * sh.k * sh.p() * sh.q(), op, "y");
  if (b) {
    check_dev_f32(*b, op, "b");
    check_numel(*b, sh.k, op, "b");
  }
  const Options opt = options();
  ConvCache& cc = prepare(cache, sh, opt);
  const Algos a = algos_for(cc, opt, false);
  Context& cx = ctx();
  void* ws = workspace(a.fwd_ws);
  HT_CUDNN_CHECK(cudnnConvolutionForward(cx.cudnn, Scalars::one(), cc.x.get(), x.raw(), cc.w, w.raw(), cc.conv, a.fwd,
                                         ws, a.fwd_ws, Scalars::zero(), cc.y.get(), y.raw()));
  if (b)
    HT_CUDNN_CHECK(cudnnAddTensor(cx.cudnn, Scalars::one(), cc.bias.get(), b->raw(), Scalars::one(), cc.y.get(), y.raw()));
}

void conv2d_backward(OpCachePtr& cache, const Conv2dShape& sh, const Tensor& x, const Tensor& w, const Tensor& dy,
                     Tensor* dx, Tensor& dw, Tensor* db, bool accumulate) {
  const char* op = "conv2d_backward";
  check_args(op, sh, x, w);
  check_dev_f32(dy, op, "dy");
  check_numel(dy, int64_t{sh.n} * sh.k * sh.p() * sh.q(), op, "dy");
  check_dev_f32(dw, op, "dw");
  check_numel(dw, w.numel(), op, "dw");
  if (dx) {
    check_dev_f32(*dx, op, "dx");
    check_numel(*dx, x.numel(), op, "dx");
  }
  if (db) {
    check_dev_f32(*db, op, "db");
    check_numel(*db, sh.k, op, "db");
  }
  const Options opt = options();
  ConvCache& cc = prepare(cache, sh, opt);
  const Algos a = algos_for(cc, opt, true);
  Context& cx = ctx();
  if (db) {
    bias_grad_kernel<<<sh.k, kThreads, 0, cx.compute>>>(static_cast<const float*>(dy.raw()),
                                                        static_cast<float*>(db->raw()), sh.n, sh.k, sh.p() * sh.q(),
                                                        accumulate);
    HT_KERNEL_CHECK();
  }
  {
    void* ws = workspace(a.bwd_filter_ws);
    HT_CUDNN_CHECK(cudnnConvolutionBackwardFilter(cx.cudnn, Scalars::one(), cc.x.get(), x.raw(), cc.y.get(), dy.raw(),
                                                  cc.conv, a.bwd_filter, ws, a.bwd_filter_ws,
                                                  Scalars::beta(accumulate), cc.w, dw.raw()));
  }
  if (dx) {
    void* ws = workspace(a.bwd_data_ws);
    HT_CUDNN_CHECK(cudnnConvolutionBackwardData(cx.cudnn, Scalars::one(), cc.w, w.raw(), cc.y.get(), dy.raw(), cc.conv,
                                                a.bwd_data, ws, a.bwd_data_ws, Scalars::zero(), cc.x.get(),
                                                dx->raw()));
  }
}

}  // namespace ht::cuda
