// conv2d: the dispatcher (arguments checked once, then this file's CPU half or the GPU half in
// src/ops/conv2d_gpu.cu, CUDA builds only) and the CPU half.
#include "src/ops/conv2d.hpp"

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <vector>

#include "src/ops/op.hpp"
#include "src/ops/dnnl_util.hpp"
#include "src/ops/dnnl_weighted_op.hpp"
#include "base/log.hpp"
#include "base/test_faults.hpp"
#include "src/ops/cpu_precision.hpp"

namespace ht {

namespace {
struct Conv2dDims {
  using Shape = Conv2dShape;
  static constexpr bool kSameDtypeY = true;
  static bool valid(const Shape& sh) {
    return sh.n > 0 && sh.c > 0 && sh.h > 0 && sh.w > 0 && sh.k > 0 && sh.r > 0 && sh.s > 0 && sh.stride > 0 &&
           sh.pad >= 0 && sh.p() > 0 && sh.q() > 0;
  }
  static std::string describe(const Shape& sh) {
    return "N=" + std::to_string(sh.n) + " C=" + std::to_string(sh.c) + " H=" + std::to_string(sh.h) +
           " W=" + std::to_string(sh.w) + " K=" + std::to_string(sh.k) + " R=" + std::to_string(sh.r) +
           " S=" + std::to_string(sh.s) + " stride=" + std::to_string(sh.stride) + " pad=" + std::to_string(sh.pad);
  }
  static std::vector<int64_t> x(const Shape& sh) { return {sh.n, sh.c, sh.h, sh.w}; }
  static std::vector<int64_t> w(const Shape& sh) { return {sh.k, sh.c, sh.r, sh.s}; }
  static std::vector<int64_t> y(const Shape& sh) { return {sh.n, sh.k, sh.p(), sh.q()}; }
  static std::vector<int64_t> b(const Shape& sh) { return {sh.k}; }
};
}  // namespace

void conv2d_forward(OpCachePtr& cache, const Conv2dShape& sh, const Tensor& x, const Tensor& w, const Tensor* b,
                    Tensor& y) {
  const OpArgs a = weighted_forward_args<Conv2dDims>("conv2d_forward", sh, x, w, b, y);
  if (a.device() == Device::cpu) return conv2d_forward_cpu(cache, sh, x, w, b, y);
  if constexpr (kHaveCuda) return conv2d_forward_gpu(cache, sh, x, w, b, y);
  no_cuda("conv2d_forward");
}

void conv2d_backward(OpCachePtr& cache, const Conv2dShape& sh, const Tensor& x, const Tensor& w, const Tensor& dy,
                     Tensor* dx, Tensor& dw, Tensor* db, bool accumulate) {
  const OpArgs a = weighted_backward_args<Conv2dDims>("conv2d_backward", sh, x, w, dy, dx, dw, db);
  if (a.device() == Device::cpu) return conv2d_backward_cpu(cache, sh, x, w, dy, dx, dw, db, accumulate);
  if constexpr (kHaveCuda) return conv2d_backward_gpu(cache, sh, x, w, dy, dx, dw, db, accumulate);
  no_cuda("conv2d_backward");
}

}  // namespace ht

// ---- The CPU half ----
// CPU conv2d with oneDNN 2.6 convolution primitives (forward, backward data, backward weights +
// bias). bfloat16 (and float16, where oneDNN has kernels) activations are NHWC and given to the
// primitives as they are (no reorders between layers): bf16 source/destination, the float32 KCRS
// master filter rounded by a cached reorder into the bf16 layout the primitive picked (once per pass),
// float32 accumulation and float32 filter/bias gradients (reordered into KCRS, accumulated in f32).
// Float32 user tensors are plain NCHW / KCRS; the primitives may pick blocked internal layouts
// (format_tag::any, e.g. nChw16c / OIhw16i16o on AVX-512), in which case cached reorders convert
// at the boundary (dnnl_util::Staged). Primitives and reorders are built once per shape and kept
// in the caller's OpCache; a shape (or bias presence) change rebuilds them. Reordered copies live
// only within a call, in the thread's workspace slots (memory = max over layers, not the sum).
// The two functions the dispatcher calls, conv2d_forward_cpu and conv2d_backward_cpu, are at the end
// of the file: the oneDNN pass shared with linear (src/ops/dnnl_weighted_op.hpp) driven by ConvTraits
// below, which builds the primitives and picks each shape's algorithm (the plan, and the fast path
// only where this machine's check proved it accurate).
namespace ht::cpu {
namespace {

namespace du = ht::dnnl_util;
using dnnl::memory;

/// How a shape is computed. Chosen from 1-thread measurements on ResNet-18/CIFAR and fmnist_cnn
/// shapes (results/cpu/conv2d_linear_ops.md):
///  - 1x1 filters: plain NCHW/OIHW, no reorders (oneDNN's GEMM-based kernel beats blocked layouts
///    plus the reorders they need);
///  - 3x3 stride 1 with >= 32 input and output channels: Winograd F(4x4,3x3) in blocked layouts,
///    1.6-2x faster than direct on ResNet layers, 1.1x on fmnist's 32->64; the 3->64 stem was 3x
///    slower with it;
///  - everything else: direct convolution, oneDNN's choice of layout (nChw16c) with reorders.
/// HT_CONV_LAYOUT=any|plain and HT_CONV_ALGO=direct|winograd|auto override it (benchmarking, or
/// direct-only runs for the tightest agreement with other frameworks). A pass planned with another
/// algorithm than direct runs it only after the fast-path check below has proven it accurate.
struct Plan {
  bool any_layout = true;
  dnnl::algorithm algo = dnnl::algorithm::convolution_direct;
};

/// The cache key: the shape with the dtypes of the activations (x and y share one).
struct ConvKey {
  Conv2dShape sh;
  DType t = DType::f32;
};

/// The plan before the fast-path check.
Plan plan_for(const ConvKey& key) {
  const Conv2dShape& sh = key.sh;
  Plan p;
  if (key.t != DType::f32) {  // NHWC as given, direct: oneDNN's bf16 kernels take channels-last
    p.any_layout = false;
    return p;
  }
  p.any_layout = !(sh.r == 1 && sh.s == 1);
  if (sh.r == 3 && sh.s == 3 && sh.stride == 1 && sh.c >= 32 && sh.k >= 32)
    p.algo = dnnl::algorithm::convolution_winograd;
  static const char* layout = std::getenv("HT_CONV_LAYOUT");
  static const char* algo = std::getenv("HT_CONV_ALGO");
  if (layout && std::strcmp(layout, "plain") == 0) p.any_layout = false;
  if (layout && std::strcmp(layout, "any") == 0) p.any_layout = true;
  if (algo && std::strcmp(algo, "direct") == 0) p.algo = dnnl::algorithm::convolution_direct;
  if (algo && std::strcmp(algo, "auto") == 0) p.algo = dnnl::algorithm::convolution_auto;
  if (algo && std::strcmp(algo, "winograd") == 0 && sh.r == 3 && sh.s == 3 && sh.stride == 1)
    p.algo = dnnl::algorithm::convolution_winograd;
  if (!p.any_layout && p.algo == dnnl::algorithm::convolution_winograd) p.algo = dnnl::algorithm::convolution_direct;
  return p;
}

/// The three passes of a convolution.
enum Pass { kForward = 0, kBackwardData = 1, kBackwardWeights = 2 };
constexpr const char* kPassNames[3] = {"forward", "backward_data", "backward_weights"};

/// The algorithm each pass runs, after the check.
struct PassAlgos {
  dnnl::algorithm algo[3] = {dnnl::algorithm::convolution_direct, dnnl::algorithm::convolution_direct,
                             dnnl::algorithm::convolution_direct};
};

/// Which plan the primitive builders follow: the checked one (what the op runs), the unchecked
/// candidate and plain direct convolution (the two sides of the check).
enum class PlanKind { checked, candidate, direct };

PassAlgos checked_algos(const ConvKey& key);

/// Seconds this process spent in fast-path checks.
std::atomic<double> g_check_seconds{0};

/// The algorithm pass `pass` of key uses under plan kind K.
template <PlanKind K>
dnnl::algorithm algo_for(const ConvKey& key, Pass pass) {
  if constexpr (K == PlanKind::direct) return dnnl::algorithm::convolution_direct;
  else if constexpr (K == PlanKind::candidate) return plan_for(key).algo;
  else return checked_algos(key).algo[pass];
}

/// Creates a primitive descriptor with algorithm `algo`, falling back to direct convolution when
/// oneDNN has no implementation for it (e.g. Winograd on a CPU without AVX-512).
template <class PD, class MakeDesc, class... Hint>
PD make_pd(dnnl::algorithm algo, const MakeDesc& make_desc, const Hint&... hint) {
  if (algo != dnnl::algorithm::convolution_direct) {
    try {
      return PD(make_desc(algo), du::scratchpad_attr(), du::engine(), hint...);
    } catch (const dnnl::error&) {
    }
  }
  return PD(make_desc(dnnl::algorithm::convolution_direct), du::scratchpad_attr(), du::engine(), hint...);
}

bool same_shape(const ConvKey& ka, const ConvKey& kb) {
  const Conv2dShape &a = ka.sh, &b = kb.sh;
  return ka.t == kb.t && a.n == b.n && a.c == b.c && a.h == b.h && a.w == b.w && a.k == b.k && a.r == b.r && a.s == b.s &&
         a.stride == b.stride && a.pad == b.pad;
}

struct Descs {
  memory::dims x, w, bd, y, strides, pad;
  memory::desc x_any, w_any, y_any;
  memory::desc x_user, w_user, y_user, b, dw_any;
  explicit Descs(const ConvKey& key) {
    const Conv2dShape& sh = key.sh;
    x = {sh.n, sh.c, sh.h, sh.w};
    w = {sh.k, sh.c, sh.r, sh.s};
    bd = {sh.k};
    y = {sh.n, sh.k, sh.p(), sh.q()};
    strides = {sh.stride, sh.stride};
    pad = {sh.pad, sh.pad};
    const bool any = plan_for(key).any_layout;
    x_user = du::act_desc(x, key.t);
    w_user = du::f32_desc(w, du::tag::oihw);
    y_user = du::act_desc(y, key.t);
    x_any = any ? du::f32_desc(x, du::tag::any) : x_user;
    // Low precision: the filter in the activations' dtype, in the layout the kernel wants.
    w_any = key.t != DType::f32 ? memory::desc(w, du::dnnl_dtype(key.t), du::tag::any)
            : any               ? du::f32_desc(w, du::tag::any)
                                : w_user;
    y_any = any ? du::f32_desc(y, du::tag::any) : y_user;
    b = du::f32_desc(bd, du::tag::x);
    dw_any = key.t != DType::f32 ? du::f32_desc(w, du::tag::any) : w_any;  // float32 filter gradient
  }
};

/// The oneDNN convolution primitives for dnnl_util::WeightedOpCache, each pass with the algorithm
/// plan kind K gives it.
template <PlanKind K>
struct ConvTraits : du::WeightedTraits<ConvKey, dnnl::convolution_forward, dnnl::convolution_backward_data,
                                    dnnl::convolution_backward_weights, Descs> {
  using Fwd = dnnl::convolution_forward;
  using BwdData = dnnl::convolution_backward_data;
  using BwdWeights = dnnl::convolution_backward_weights;
  using Shape = ConvKey;
  static bool same(const Shape& a, const Shape& b) { return same_shape(a, b); }
  static ConvKey key(const Conv2dShape& sh, DType x, DType) { return ConvKey{sh, x}; }

  static typename Fwd::primitive_desc fwd(const Shape& sh, bool bias) {
    const Descs d(sh);
    return make_pd<typename Fwd::primitive_desc>(algo_for<K>(sh, kForward), [&](dnnl::algorithm a) {
      const auto pk = dnnl::prop_kind::forward_training;
      return bias ? Fwd::desc(pk, a, d.x_any, d.w_any, d.b, d.y_any, d.strides, d.pad, d.pad)
                  : Fwd::desc(pk, a, d.x_any, d.w_any, d.y_any, d.strides, d.pad, d.pad);
    });
  }
  static typename BwdData::primitive_desc bwd_data(const Shape& sh, const typename Fwd::primitive_desc& hint) {
    const Descs d(sh);
    return make_pd<typename BwdData::primitive_desc>(
        algo_for<K>(sh, kBackwardData),
        [&](dnnl::algorithm a) { return BwdData::desc(a, d.x_any, d.w_any, d.y_any, d.strides, d.pad, d.pad); },
        hint);
  }
  static typename BwdWeights::primitive_desc bwd_weights(const Shape& sh, bool bias,
                                                        const typename Fwd::primitive_desc& hint) {
    const Descs d(sh);
    return make_pd<typename BwdWeights::primitive_desc>(
        algo_for<K>(sh, kBackwardWeights),
        [&](dnnl::algorithm a) {
          return bias ? BwdWeights::desc(a, d.x_any, d.dw_any, d.b, d.y_any, d.strides, d.pad, d.pad)
                      : BwdWeights::desc(a, d.x_any, d.dw_any, d.y_any, d.strides, d.pad, d.pad);
        },
        hint);
  }
};

/// Uniform values in [-1, 1) from a fixed seed (the check's data: the same on every rank and run).
void fill_uniform(Tensor& t, uint64_t seed) {
  float* p = t.data<float>();
  uint64_t x = seed;
  for (int64_t i = 0; i < t.numel(); ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;  // Knuth's MMIX LCG
    p[i] = static_cast<float>(static_cast<double>(x >> 11) * 0x1.0p-52 - 1.0);
  }
}

/// Relative error of a against b in the 2-norm.
double rel_l2(const Tensor& a, const Tensor& b) {
  double num = 0, den = 0;
  const float *pa = a.data<float>(), *pb = b.data<float>();
  for (int64_t i = 0; i < a.numel(); ++i) {
    num += (double(pa[i]) - pb[i]) * (double(pa[i]) - pb[i]);
    den += double(pb[i]) * pb[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-300);
}

const char* algo_name(dnnl::algorithm a) {
  switch (a) {
    case dnnl::algorithm::convolution_winograd: return "winograd";
    case dnnl::algorithm::convolution_auto: return "auto";
    default: return "direct";
  }
}

/// The fast-path check (docs/precision.md#convolution-plans): runs the planned (candidate) primitives
/// and direct convolution on the same uniform random x, w and dy of the exact shape, and keeps the
/// candidate for each pass whose result (y, dx or dw) is within kConvFastPathBound of direct's;
/// any other pass runs direct convolution, said in one line on stderr. Test fault
/// conv.fast_path_error=PASS[,PASS...] (forward, backward_data, backward_weights or all) adds a
/// relative error of 1e-3 to the candidate's result of those passes here, as a wrong kernel would.
PassAlgos check_fast_path(const ConvKey& key) {
  const Conv2dShape& sh = key.sh;
  const auto t0 = std::chrono::steady_clock::now();
  Tensor x = Tensor::empty({sh.n, sh.c, sh.h, sh.w}), w = Tensor::empty({sh.k, sh.c, sh.r, sh.s}),
         dy = Tensor::empty({sh.n, sh.k, sh.p(), sh.q()});
  fill_uniform(x, 1);
  fill_uniform(w, 2);
  fill_uniform(dy, 3);
  Tensor out[2][3];  // [candidate, direct][pass]
  du::WeightedOpCache<ConvTraits<PlanKind::candidate>> fast;
  du::WeightedOpCache<ConvTraits<PlanKind::direct>> ref;
  for (int side = 0; side < 2; ++side) {
    Tensor& y = out[side][kForward] = Tensor::empty(dy.shape());
    Tensor& dx = out[side][kBackwardData] = Tensor::empty(x.shape());
    Tensor& dw = out[side][kBackwardWeights] = Tensor::empty(w.shape());
    if (side == 0) {
      fast.forward(key, x.raw(), w.raw(), nullptr, y.raw());
      fast.backward(key, x.raw(), w.raw(), dy.raw(), dx.raw(), dw.raw(), nullptr, false);
    } else {
      ref.forward(key, x.raw(), w.raw(), nullptr, y.raw());
      ref.backward(key, x.raw(), w.raw(), dy.raw(), dx.raw(), dw.raw(), nullptr, false);
    }
  }
  const std::string faulty = TestFaults::get().text("conv.fast_path_error").value_or("");
  const dnnl::algorithm candidate = plan_for(key).algo;
  PassAlgos chosen;
  for (int pass = 0; pass < 3; ++pass) {
    if (faulty == "all" || faulty.find(kPassNames[pass]) != std::string::npos) {
      float* p = out[0][pass].data<float>();
      for (int64_t i = 0; i < out[0][pass].numel(); ++i) p[i] *= (i % 2 ? 1.002f : 0.998f);  // ~1e-3 relative
    }
    const double err = rel_l2(out[0][pass], out[1][pass]);
    if (err <= kConvFastPathBound) {
      chosen.algo[pass] = candidate;
      continue;
    }
    char line[400];
    std::snprintf(line, sizeof line,
                  "conv2d %dx%d %d->%d on %dx%dx%d (batch %d), %s: oneDNN's %s result differs from "
                  "direct convolution by %.1e (bound %.0e, docs/precision.md#convolution-plans) on this CPU (%s): this "
                  "pass runs direct convolution",
                  sh.r, sh.s, sh.c, sh.k, sh.c, sh.h, sh.w, sh.n, kPassNames[pass], algo_name(candidate), err,
                  kConvFastPathBound, onednn_cpu_isa().c_str());
    log_warn(line);  // every rank that sees it, with its rank and host: the CPU is that host's
  }
  g_check_seconds.fetch_add(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return chosen;
}

/// The checked plan of key: the check runs once per shape and process (under a lock; a handful of
/// shapes per model), the first time a primitive of that shape is built.
PassAlgos checked_algos(const ConvKey& key) {
  static std::mutex mu;
  static std::vector<std::pair<ConvKey, PassAlgos>> checked;
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& [k, a] : checked)
    if (same_shape(k, key)) return a;
  PassAlgos a;  // direct everywhere unless the plan has a fast path
  if (plan_for(key).algo != dnnl::algorithm::convolution_direct) a = check_fast_path(key);
  checked.emplace_back(key, a);
  return a;
}

}  // namespace

}  // namespace ht::cpu

namespace ht {

Conv2dCpuPlan conv2d_cpu_plan(const Conv2dShape& sh) {
  const cpu::ConvKey key{sh, DType::f32};
  const cpu::PassAlgos a = cpu::checked_algos(key);
  return {cpu::algo_name(a.algo[cpu::kForward]), cpu::algo_name(a.algo[cpu::kBackwardData]),
          cpu::algo_name(a.algo[cpu::kBackwardWeights])};
}

double conv2d_cpu_check_seconds() { return cpu::g_check_seconds.load(); }

// The CPU halves declared in src/ops/conv2d.hpp.
void conv2d_forward_cpu(OpCachePtr& cache, const Conv2dShape& sh, const Tensor& x, const Tensor& w, const Tensor* b,
                        Tensor& y) {
  dnnl_util::weighted_op_forward<cpu::ConvTraits<cpu::PlanKind::checked>>(cache, sh, x, w, b, y);
}
void conv2d_backward_cpu(OpCachePtr& cache, const Conv2dShape& sh, const Tensor& x, const Tensor& w, const Tensor& dy,
                         Tensor* dx, Tensor& dw, Tensor* db, bool accumulate) {
  dnnl_util::weighted_op_backward<cpu::ConvTraits<cpu::PlanKind::checked>>(cache, sh, x, w, dy, dx, dw, db,
                                                                            accumulate);
}

}  // namespace ht
