// Batch normalization through cuDNN (CUDNN_BATCHNORM_SPATIAL: statistics per channel over N,H,W).
// Semantics match src/ops/batchnorm2d.hpp (PyTorch BatchNorm2d):
//  - cudnnBatchNormalizationForwardTraining with exponentialAverageFactor = momentum updates
//    running_mean with the batch mean and running_var with the UNBIASED batch variance
//    (M/(M-1) correction, as PyTorch; PyTorch's own CUDA path calls this same cuDNN function);
//  - resultSaveMean / resultSaveInvVariance are mean_b and 1/sqrt(var_b + eps), i.e. save_mean and
//    save_invstd, consumed by cudnnBatchNormalizationBackward;
//  - dgamma/dbeta are overwritten (betaParamDiff = 0) or accumulated (betaParamDiff = 1) in float32;
//    in low precision the accumulation is ours (see batchnorm2d_backward).
// eps must be > 0 as on the CPU (cuDNN 9 only asks eps >= CUDNN_BN_MIN_EPSILON, which is 0.0 since
// cuDNN 8; cuDNN 7 had 1e-5), and the same eps is passed to forward and backward.
//
// bfloat16/float16 activations (NHWC, src/ops/gpu_common.cuh): x, y, dy and dx in the low precision; gamma,
// beta, the running and saved statistics and the parameter gradients stay float32 (cuDNN computes
// the statistics in float32), through the Ex entry points in CUDNN_BATCHNORM_SPATIAL_PERSISTENT mode
// (cuDNN's fast NHWC kernels, as PyTorch's channels_last path), or plain CUDNN_BATCHNORM_SPATIAL
// under train.deterministic. The reserve space the forward fills is kept in the layer's cache for
// the backward of the same micro-batch.
#include "src/ops/gpu_common.cuh"
#include "src/ops/batchnorm2d.hpp"
#include "src/ops/elementwise.hpp"

namespace ht {
using namespace ht::cuda;  // the GPU runtime: ctx(), options(), workspaces
namespace {

/// cuDNN's own limit on eps (the dispatcher has checked eps > 0 and every shape).
void check_cudnn_eps(const char* op, const BatchNormShape& sh) {
  op_check(static_cast<double>(sh.eps) >= CUDNN_BN_MIN_EPSILON, op,
           "eps " + std::to_string(sh.eps) + " is below cuDNN's minimum " + std::to_string(CUDNN_BN_MIN_EPSILON));
}

struct BnCache : OpCache {
  bool valid = false;
  int n = 0, c = 0, h = 0, w = 0;
  ActFormat fmt;
  bool det = false;
  TensorDesc x, param;
  Tensor reserve;  ///< the Ex forward's reserve space, read by the Ex backward (low precision only)
  size_t reserve_bytes = 0;
  Tensor dgamma_part, dbeta_part;  ///< [C] float32: one micro-batch's parameter gradients (low precision)
};

/// The Ex mode of a low-precision batch norm (see the header comment).
cudnnBatchNormMode_t ex_mode(bool deterministic) {
  return deterministic ? CUDNN_BATCHNORM_SPATIAL : CUDNN_BATCHNORM_SPATIAL_PERSISTENT;
}

/// The cache's descriptors for sh, after the cuDNN eps check of op (throws ht::OpError).
BnCache& prepare(const char* op, OpCachePtr& slot, const BatchNormShape& sh, ActFormat f) {
  check_cudnn_eps(op, sh);
  BnCache& bc = cache_as<BnCache>(slot);
  const bool det = options().deterministic;
  if (bc.valid && bc.n == sh.n && bc.c == sh.c && bc.h == sh.h && bc.w == sh.w && bc.fmt == f && bc.det == det)
    return bc;
  bc.x.set(sh.n, sh.c, sh.h, sh.w, f);
  bc.fmt = f;
  bc.det = det;
  bc.reserve_bytes = 0;
  if (f.low_precision()) {
    HT_CUDNN_CHECK(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
        ctx().cudnn, ex_mode(det), CUDNN_BATCHNORM_OPS_BN, nullptr, bc.x.get(), &bc.reserve_bytes));
    if (bc.reserve_bytes > 0)
      bc.reserve.ensure({static_cast<int64_t>(bc.reserve_bytes)}, DType::u8, Device::cuda);
  }
  bc.param.set(1, sh.c, 1, 1);  // cudnnDeriveBNTensorDescriptor gives the same for spatial mode
  bc.n = sh.n;
  bc.c = sh.c;
  bc.h = sh.h;
  bc.w = sh.w;
  bc.valid = true;
  return bc;
}

}  // namespace

// The GPU half: the functions declared in src/ops/batchnorm2d.hpp.
void batchnorm2d_forward_train_gpu(OpCachePtr& cache, const BatchNormShape& sh, const Tensor& x, const Tensor& gamma,
                               const Tensor& beta, Tensor& y, Tensor& running_mean, Tensor& running_var,
                               Tensor& save_mean, Tensor& save_invstd) {
  BnCache& bc = prepare("batchnorm2d_forward_train", cache, sh, act_format(x));
  if (bc.fmt.low_precision()) {
    Context& cx = ctx();
    const cudnnBatchNormMode_t mode = ex_mode(bc.det);
    size_t ws_bytes = 0;
    HT_CUDNN_CHECK(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
        cx.cudnn, mode, CUDNN_BATCHNORM_OPS_BN, bc.x.get(), nullptr, bc.x.get(), bc.param.get(), nullptr, &ws_bytes));
    void* ws = workspace(ws_bytes);
    HT_CUDNN_CHECK(cudnnBatchNormalizationForwardTrainingEx(
        cx.cudnn, mode, CUDNN_BATCHNORM_OPS_BN, Scalars::one(), Scalars::zero(), bc.x.get(), x.raw(), nullptr, nullptr,
        bc.x.get(), y.raw(), bc.param.get(), gamma.raw(), beta.raw(), static_cast<double>(sh.momentum),
        running_mean.raw(), running_var.raw(), static_cast<double>(sh.eps), save_mean.raw(), save_invstd.raw(),
        nullptr, ws, ws_bytes, bc.reserve_bytes ? bc.reserve.raw() : nullptr, bc.reserve_bytes));
    return;
  }
  HT_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
      ctx().cudnn, CUDNN_BATCHNORM_SPATIAL, Scalars::one(), Scalars::zero(), bc.x.get(), x.raw(), bc.x.get(), y.raw(),
      bc.param.get(), gamma.raw(), beta.raw(), static_cast<double>(sh.momentum), running_mean.raw(),
      running_var.raw(), static_cast<double>(sh.eps), save_mean.raw(), save_invstd.raw()));
}

void batchnorm2d_forward_infer_gpu(OpCachePtr& cache, const BatchNormShape& sh, const Tensor& x, const Tensor& gamma,
                               const Tensor& beta, const Tensor& running_mean, const Tensor& running_var, Tensor& y) {
  BnCache& bc = prepare("batchnorm2d_forward_infer", cache, sh, act_format(x));
  HT_CUDNN_CHECK(cudnnBatchNormalizationForwardInference(
      ctx().cudnn, CUDNN_BATCHNORM_SPATIAL, Scalars::one(), Scalars::zero(), bc.x.get(), x.raw(), bc.x.get(), y.raw(),
      bc.param.get(), gamma.raw(), beta.raw(), running_mean.raw(), running_var.raw(), static_cast<double>(sh.eps)));
}

void batchnorm2d_backward_gpu(OpCachePtr& cache, const BatchNormShape& sh, const Tensor& x, const Tensor& dy,
                          const Tensor& gamma, const Tensor& save_mean, const Tensor& save_invstd, Tensor& dx,
                          Tensor& dgamma, Tensor& dbeta, bool accumulate) {
  BnCache& bc = prepare("batchnorm2d_backward", cache, sh, act_format(x));
  if (bc.fmt.low_precision()) {
    Context& cx = ctx();
    const cudnnBatchNormMode_t mode = ex_mode(bc.det);
    size_t ws_bytes = 0;
    HT_CUDNN_CHECK(cudnnGetBatchNormalizationBackwardExWorkspaceSize(
        cx.cudnn, mode, CUDNN_BATCHNORM_OPS_BN, bc.x.get(), bc.x.get(), bc.x.get(), nullptr, bc.x.get(), bc.param.get(),
        nullptr, &ws_bytes));
    void* ws = workspace(ws_bytes);
    // Accumulating (train.accumulation_steps > 1) does not rely on betaParamDiff = 1 here: the Ex
    // backward in the persistent NHWC mode is a path PyTorch never accumulates through, so nothing
    // vouches for it. cuDNN writes this micro-batch's gradients into float32 scratch (beta 0) and they
    // are added in float32, as conv2d accumulates its low-precision filter gradient.
    Tensor* dg = &dgamma;
    Tensor* db = &dbeta;
    if (accumulate) {
      bc.dgamma_part.ensure({sh.c}, DType::f32, Device::cuda);
      bc.dbeta_part.ensure({sh.c}, DType::f32, Device::cuda);
      dg = &bc.dgamma_part;
      db = &bc.dbeta_part;
    }
    HT_CUDNN_CHECK(cudnnBatchNormalizationBackwardEx(
        cx.cudnn, mode, CUDNN_BATCHNORM_OPS_BN, Scalars::one(), Scalars::zero(), Scalars::one(), Scalars::zero(),
        bc.x.get(), x.raw(), nullptr, nullptr, bc.x.get(), dy.raw(), nullptr, nullptr, bc.x.get(), dx.raw(),
        bc.param.get(), gamma.raw(), nullptr, dg->raw(), db->raw(), static_cast<double>(sh.eps), save_mean.raw(),
        save_invstd.raw(), nullptr, ws, ws_bytes, bc.reserve_bytes ? bc.reserve.raw() : nullptr, bc.reserve_bytes));
    if (accumulate) {
      add_inplace_gpu(dgamma, bc.dgamma_part);
      add_inplace_gpu(dbeta, bc.dbeta_part);
    }
    return;
  }
  HT_CUDNN_CHECK(cudnnBatchNormalizationBackward(
      ctx().cudnn, CUDNN_BATCHNORM_SPATIAL, Scalars::one(), Scalars::zero(), Scalars::one(), Scalars::beta(accumulate),
      bc.x.get(), x.raw(), bc.x.get(), dy.raw(), bc.x.get(), dx.raw(), bc.param.get(), gamma.raw(), dgamma.raw(),
      dbeta.raw(), static_cast<double>(sh.eps), save_mean.raw(), save_invstd.raw()));
}

}  // namespace ht
