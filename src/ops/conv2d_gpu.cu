// 2-D convolution through cuDNN (legacy convolution API): forward, backward data, backward filter,
// plus own kernels for the bias gradient (a fixed-order reduction, deterministic by construction).
//
// Algorithm choice, once per (shape, options) in a process-wide table shared by all layers:
//  - default: cudnnFind*Algorithm (each algorithm timed on the device, as PyTorch's
//    cudnn.benchmark), fastest one whose workspace fits Options::workspace_bytes;
//  - deterministic: cudnnGet*Algorithm_v7 heuristics (no timing, so the same choice every run),
//    restricted to results reported CUDNN_DETERMINISTIC and never the algorithms cuDNN documents as
//    non-deterministic (backward data ALGO_0, backward filter ALGO_0 and ALGO_3).
// Each choice is an (algorithm, math type) pair (src/ops/conv2d_gpu_algo.hpp, tested on the CPU); the math
// type is set on the descriptor before every call because the three passes share one descriptor.
// FP32 math is strict (CUDNN_FMA_MATH) unless Options::allow_tf32.
//
// Activation formats (src/ops/gpu_common.cuh): float32 NCHW, or bfloat16/float16 NHWC (channels-last) with
// float32 compute (the convolution descriptor's compute type is CUDNN_DATA_FLOAT in every format:
// cuDNN's PSEUDO_BFLOAT16/PSEUDO_HALF configurations), algorithms searched with CUDNN_TENSOR_OP_MATH as
// PyTorch does (tensor-core kernels first; speed only, to be measured on a GPU). The filter and its
// gradient stay float32 KCRS masters in the op interface: each pass first rounds the master to a
// low-precision KRSC copy in the layer's cache (own kernel), and cuDNN's low-precision filter
// gradient is widened into the float32 one (overwrite or accumulate in float32, never in bf16).
// The bias add and bias gradient are own kernels there (float32 bias, fixed-order sums).
#include <cudnn.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <sstream>
#include <tuple>

#include "src/ops/gpu_common.cuh"
#include "src/ops/conv2d_gpu_kernels.cuh"
#include "src/ops/conv2d_gpu_algo.hpp"
#include "src/ops/conv2d.hpp"

namespace ht::cuda {
namespace {

struct AlgoKey {
  int n, c, h, w, k, r, s, stride, pad;
  size_t ws_cap;
  bool det, tf32;
  int dtype;
  bool nhwc;
  auto tie() const { return std::tie(n, c, h, w, k, r, s, stride, pad, ws_cap, det, tf32, dtype, nhwc); }
  bool operator<(const AlgoKey& o) const { return tie() < o.tie(); }
};

/// One (algorithm, math type, workspace) per pass; see src/ops/conv2d_gpu_algo.hpp.
struct Algos {
  bool have_fwd = false, have_bwd = false;
  ConvAlgoChoice fwd, bwd_data, bwd_filter;
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
  ActFormat fmt;
  Tensor w_lp, dw_lp;  ///< low-precision filter and filter gradient (fmt's dtype, KRSC when NHWC)
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

/// Tensor-core math allowed: TF32 on float32 data when the options allow it; always for bfloat16 and
/// float16 data (their products are exact in the float32 accumulator). conv2d_gpu_algo.hpp's rules for
/// "allow_tf32" are the rules of this flag.
bool tensor_ops(const Options& opt, ActFormat f) { return opt.allow_tf32 || f.low_precision(); }

cudnnMathType_t to_cudnn(ConvMath m);

ConvCache& prepare(OpCachePtr& slot, const Conv2dShape& sh, const Options& opt, ActFormat f) {
  ConvCache& cc = cache_as<ConvCache>(slot);
  if (cc.valid && same_shape(cc.sh, sh) && cc.tf32 == opt.allow_tf32 && cc.fmt == f) return cc;
  cc.valid = false;
  cc.x.set(sh.n, sh.c, sh.h, sh.w, f);
  cc.y.set(sh.n, sh.k, sh.p(), sh.q(), f);
  cc.bias.set(1, sh.k, 1, 1);
  HT_CUDNN_CHECK(cudnnSetFilter4dDescriptor(cc.w, cudnn_type(f.dtype), f.nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                            sh.k, sh.c, sh.r, sh.s));
  HT_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(cc.conv, sh.pad, sh.pad, sh.stride, sh.stride, 1, 1,
                                                 CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  HT_CUDNN_CHECK(cudnnSetConvolutionMathType(cc.conv, to_cudnn(conv_base_math(tensor_ops(opt, f), f.low_precision()))));
  if (f.low_precision()) {
    const std::vector<int64_t> filt = f.nhwc ? std::vector<int64_t>{sh.k, sh.r, sh.s, sh.c}
                                             : std::vector<int64_t>{sh.k, sh.c, sh.r, sh.s};
    cc.w_lp.ensure(filt, f.dtype, Device::cuda);
    cc.dw_lp.ensure(filt, f.dtype, Device::cuda);
  }
  int n = 0, c = 0, h = 0, w = 0;
  HT_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(cc.conv, cc.x.get(), cc.w, &n, &c, &h, &w));
  if (n != sh.n || c != sh.k || h != sh.p() || w != sh.q())
    throw RuntimeError("conv2d: cuDNN output shape [" + std::to_string(n) + "," + std::to_string(c) + "," +
                       std::to_string(h) + "," + std::to_string(w) + "] differs from the expected one for " +
                       shape_text(sh));
  cc.sh = sh;
  cc.tf32 = opt.allow_tf32;
  cc.fmt = f;
  cc.valid = true;
  return cc;
}

// The cuDNN enum values conv2d_gpu_algo.cpp relies on (it has no cuDNN types).
static_assert(CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 == 0 && CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 == 0 &&
                  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3 == 3,
              "cuDNN algorithm numbering changed: update conv_algo_nondeterministic");

ConvMath to_math(cudnnMathType_t m) {
  switch (m) {
    case CUDNN_DEFAULT_MATH: return ConvMath::default_math;
    case CUDNN_TENSOR_OP_MATH: return ConvMath::tensor_op;
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return ConvMath::tensor_op_allow_conversion;
    case CUDNN_FMA_MATH: return ConvMath::fma;
  }
  return ConvMath::tensor_op_allow_conversion;  // unknown: refused by conv_run_math
}

cudnnMathType_t to_cudnn(ConvMath m) {
  switch (m) {
    case ConvMath::default_math: return CUDNN_DEFAULT_MATH;
    case ConvMath::tensor_op: return CUDNN_TENSOR_OP_MATH;
    case ConvMath::tensor_op_allow_conversion: return CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
    case ConvMath::fma: return CUDNN_FMA_MATH;
  }
  return CUDNN_FMA_MATH;
}

void set_math(ConvCache& cc, ConvMath m) { HT_CUDNN_CHECK(cudnnSetConvolutionMathType(cc.conv, to_cudnn(m))); }

template <class Perf>
std::vector<ConvAlgoPerf> to_perfs(const Perf* perf, int got) {
  std::vector<ConvAlgoPerf> v;
  for (int i = 0; i < got; ++i)
    v.push_back(ConvAlgoPerf{static_cast<int>(perf[i].algo), perf[i].status == CUDNN_STATUS_SUCCESS, perf[i].memory,
                             to_math(perf[i].mathType), perf[i].determinism == CUDNN_DETERMINISTIC});
  return v;
}

// cudnnFind* (not Ex) allocates its own buffers and trial workspaces with cudaMalloc, outside our
// stream-ordered pool, which keeps freed blocks (release threshold: never). Return the pool's idle
// blocks to the driver first so the search is not starved by memory we cache but do not use
// (PyTorch empties its cache around cudnnFind for the same reason). Once per shape.
void release_pool_for_find(Context& cx) {
  HT_CUDA_CHECK(cudaStreamSynchronize(cx.compute));
  cudaMemPool_t pool;
  HT_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, cx.device));
  HT_CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
}

// Chooses one pass's algorithm. `find(perf, &got)` and `get(perf, &got)` call cudnnFind* /
// cudnnGet*_v7; `ws(algo, &bytes)` cudnnGet*WorkspaceSize. The descriptor's math type is reset to
// the base one for the search and set to the chosen pair's before the workspace query; the caller
// sets it again before each run (the descriptor is shared by the three passes).
template <class Perf, class AlgoT, int kCount, class Find, class Get, class Ws>
ConvAlgoChoice choose(ConvPass pass, ConvCache& cc, const Options& opt, Find find, Get get, Ws ws) {
  Context& cx = ctx();
  Perf perf[kCount];
  int got = 0;
  const bool tc = tensor_ops(opt, cc.fmt);
  set_math(cc, conv_base_math(tc, cc.fmt.low_precision()));
  if (opt.deterministic) {
    HT_CUDNN_CHECK(get(perf, &got));
  } else {
    release_pool_for_find(cx);
    HT_CUDNN_CHECK(find(perf, &got));
  }
  const std::vector<ConvAlgoPerf> perfs = to_perfs(perf, got);
  const auto choice = choose_conv_algo(pass, perfs, opt.workspace_bytes, opt.deterministic, tc,
                                       [&](int algo, ConvMath math) -> std::optional<size_t> {
                                         set_math(cc, math);
                                         size_t bytes = 0;
                                         if (ws(static_cast<AlgoT>(algo), &bytes) != CUDNN_STATUS_SUCCESS)
                                           return std::nullopt;
                                         return bytes;
                                       });
  if (!choice)
    throw RuntimeError(
        no_conv_algo_message(pass, shape_text(cc.sh) + " in " + dtype_name(cc.fmt.dtype) + (cc.fmt.nhwc ? " NHWC" : " NCHW"),
                             perfs, opt.workspace_bytes, opt.deterministic, tc));
  return *choice;
}

void choose_fwd(ConvCache& cc, const Options& opt, Algos& a) {
  cudnnHandle_t h = ctx().cudnn;
  a.fwd = choose<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t, CUDNN_CONVOLUTION_FWD_ALGO_COUNT>(
      ConvPass::forward, cc, opt,
      [&](cudnnConvolutionFwdAlgoPerf_t* p, int* got) {
        return cudnnFindConvolutionForwardAlgorithm(h, cc.x.get(), cc.w, cc.conv, cc.y.get(),
                                                    CUDNN_CONVOLUTION_FWD_ALGO_COUNT, got, p);
      },
      [&](cudnnConvolutionFwdAlgoPerf_t* p, int* got) {
        return cudnnGetConvolutionForwardAlgorithm_v7(h, cc.x.get(), cc.w, cc.conv, cc.y.get(),
                                                      CUDNN_CONVOLUTION_FWD_ALGO_COUNT, got, p);
      },
      [&](cudnnConvolutionFwdAlgo_t algo, size_t* bytes) {
        return cudnnGetConvolutionForwardWorkspaceSize(h, cc.x.get(), cc.w, cc.conv, cc.y.get(), algo, bytes);
      });
  a.have_fwd = true;
}

void choose_bwd(ConvCache& cc, const Options& opt, Algos& a) {
  cudnnHandle_t h = ctx().cudnn;
  a.bwd_data =
      choose<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT>(
          ConvPass::backward_data, cc, opt,
          [&](cudnnConvolutionBwdDataAlgoPerf_t* p, int* got) {
            return cudnnFindConvolutionBackwardDataAlgorithm(h, cc.w, cc.y.get(), cc.conv, cc.x.get(),
                                                             CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, got, p);
          },
          [&](cudnnConvolutionBwdDataAlgoPerf_t* p, int* got) {
            return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, cc.w, cc.y.get(), cc.conv, cc.x.get(),
                                                               CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, got, p);
          },
          [&](cudnnConvolutionBwdDataAlgo_t algo, size_t* bytes) {
            return cudnnGetConvolutionBackwardDataWorkspaceSize(h, cc.w, cc.y.get(), cc.conv, cc.x.get(), algo, bytes);
          });
  a.bwd_filter = choose<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t,
                        CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT>(
      ConvPass::backward_filter, cc, opt,
      [&](cudnnConvolutionBwdFilterAlgoPerf_t* p, int* got) {
        return cudnnFindConvolutionBackwardFilterAlgorithm(h, cc.x.get(), cc.y.get(), cc.conv, cc.w,
                                                           CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, got, p);
      },
      [&](cudnnConvolutionBwdFilterAlgoPerf_t* p, int* got) {
        return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, cc.x.get(), cc.y.get(), cc.conv, cc.w,
                                                             CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, got, p);
      },
      [&](cudnnConvolutionBwdFilterAlgo_t algo, size_t* bytes) {
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, cc.x.get(), cc.y.get(), cc.conv, cc.w, algo, bytes);
      });
  a.have_bwd = true;
}

AlgoKey key_for(const Conv2dShape& sh, const Options& opt, ActFormat f) {
  return AlgoKey{sh.n, sh.c, sh.h, sh.w, sh.k, sh.r, sh.s, sh.stride, sh.pad, opt.workspace_bytes, opt.deterministic,
                 opt.allow_tf32, static_cast<int>(f.dtype), f.nhwc};
}

Algos algos_for(ConvCache& cc, const Options& opt, bool backward) {
  std::lock_guard<std::mutex> lk(g_algo_mu);
  Algos& a = g_algos[key_for(cc.sh, opt, cc.fmt)];
  if (!backward && !a.have_fwd) choose_fwd(cc, opt, a);
  if (backward && !a.have_bwd) choose_bwd(cc, opt, a);
  return a;
}

}  // namespace

std::string conv2d_algo_text(const Conv2dShape& sh, DType dtype) {
  const Options opt = options();
  std::lock_guard<std::mutex> lk(g_algo_mu);
  auto it = g_algos.find(key_for(sh, opt, ActFormat{dtype, dtype == DType::bf16 || dtype == DType::f16}));
  if (it == g_algos.end()) return "no algorithm chosen yet";
  const Algos& a = it->second;
  std::ostringstream os;
  auto one = [&](const char* name, bool have, const ConvAlgoChoice& c) {
    os << name << " ";
    if (have) os << "algo " << c.algo << " " << conv_math_name(c.math) << " workspace " << c.workspace << " B";
    else os << "-";
  };
  one("forward", a.have_fwd, a.fwd);
  os << "; ";
  one("backward-data", a.have_bwd, a.bwd_data);
  os << "; ";
  one("backward-filter", a.have_bwd, a.bwd_filter);
  return os.str();
}

namespace {

/// The filter cuDNN reads in cc's format: the float32 master itself, or its low-precision copy made
/// now (the master changes every step; a pass costs one read of K*C*R*S floats).
const void* filter_for(ConvCache& cc, const Conv2dShape& sh, const Tensor& w) {
  if (!cc.fmt.low_precision()) return w.raw();
  conv_filter_to_lowp(static_cast<const float*>(w.raw()), cc.w_lp.raw(), cc.fmt.dtype, sh, cc.fmt.nhwc);
  return cc.w_lp.raw();
}

}  // namespace

}  // namespace ht::cuda

namespace ht {
using namespace ht::cuda;  // this file's helpers above

// The GPU halves declared in src/ops/conv2d.hpp.
void conv2d_forward_gpu(OpCachePtr& cache, const Conv2dShape& sh, const Tensor& x, const Tensor& w, const Tensor* b,
                        Tensor& y) {
  const Options opt = options();
  const ActFormat f = act_format(x);
  ConvCache& cc = prepare(cache, sh, opt, f);
  const Algos a = algos_for(cc, opt, false);
  Context& cx = ctx();
  const void* wp = filter_for(cc, sh, w);
  void* ws = workspace(a.fwd.workspace);
  set_math(cc, a.fwd.math);
  HT_CUDNN_CHECK(cudnnConvolutionForward(cx.cudnn, Scalars::one(), cc.x.get(), x.raw(), cc.w, wp, cc.conv,
                                         static_cast<cudnnConvolutionFwdAlgo_t>(a.fwd.algo), ws, a.fwd.workspace,
                                         Scalars::zero(), cc.y.get(), y.raw()));
  if (b && f.low_precision()) conv_bias_add(y, static_cast<const float*>(b->raw()), sh, f);
  else if (b)
    HT_CUDNN_CHECK(cudnnAddTensor(cx.cudnn, Scalars::one(), cc.bias.get(), b->raw(), Scalars::one(), cc.y.get(), y.raw()));
}

void conv2d_backward_gpu(OpCachePtr& cache, const Conv2dShape& sh, const Tensor& x, const Tensor& w, const Tensor& dy,
                         Tensor* dx, Tensor& dw, Tensor* db, bool accumulate) {
  const Options opt = options();
  const ActFormat f = act_format(x);
  ConvCache& cc = prepare(cache, sh, opt, f);
  const Algos a = algos_for(cc, opt, true);
  Context& cx = ctx();
  if (db) conv_bias_grad(dy, static_cast<float*>(db->raw()), sh, f, accumulate);
  {
    // Low precision: cuDNN writes the low-precision gradient (beta 0), widened into dw below.
    const bool lp = f.low_precision();
    void* ws = workspace(a.bwd_filter.workspace);
    set_math(cc, a.bwd_filter.math);
    HT_CUDNN_CHECK(cudnnConvolutionBackwardFilter(cx.cudnn, Scalars::one(), cc.x.get(), x.raw(), cc.y.get(), dy.raw(),
                                                  cc.conv, static_cast<cudnnConvolutionBwdFilterAlgo_t>(a.bwd_filter.algo),
                                                  ws, a.bwd_filter.workspace, lp ? Scalars::zero() : Scalars::beta(accumulate),
                                                  cc.w, lp ? cc.dw_lp.raw() : dw.raw()));
    if (lp) conv_filter_grad_from_lowp(cc.dw_lp.raw(), f.dtype, static_cast<float*>(dw.raw()), sh, f.nhwc, accumulate);
  }
  if (dx) {
    const void* wp = filter_for(cc, sh, w);
    void* ws = workspace(a.bwd_data.workspace);
    set_math(cc, a.bwd_data.math);
    HT_CUDNN_CHECK(cudnnConvolutionBackwardData(cx.cudnn, Scalars::one(), cc.w, wp, cc.y.get(), dy.raw(), cc.conv,
                                                static_cast<cudnnConvolutionBwdDataAlgo_t>(a.bwd_data.algo), ws,
                                                a.bwd_data.workspace, Scalars::zero(), cc.x.get(), dx->raw()));
  }
}

}  // namespace ht
