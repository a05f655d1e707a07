#pragma once
// The device halves of the ops, declared once for both devices. Each op family has one table of
// function pointers below; the CPU half defines ht::cpu::<family> (src/ops/<op>_cpu.cpp) and the GPU
// half defines ht::cuda::<family> (cuda/<op>.cu, CUDA builds only), so both halves of an op are found
// by the same name: cpu::conv2d.forward and cuda::conv2d.forward. The public functions of
// src/ops/<op>.hpp validate the arguments once (OpArgs) and call the half of the input's device; the
// halves trust their arguments. The shapes are in src/ops/op_shapes.hpp. A build without CUDA
// defines no ht::cuda table and its dispatchers never name one (HT_DISPATCH in src/ops/op.hpp).
//
// Precision (issue 13; the table of what runs in which precision is docs/precision.md): the
// activations carry the compute dtype. A 4-D activation [N,C,H,W] of dtype float32 is NCHW in
// memory; of dtype bfloat16 or float16 it is NHWC (channels-last): the shape stays the logical
// [N,C,H,W]. 2-D activations [N,F] are row-major in every dtype. A half learns the precision of a
// call from its input x. Parameters (w, b, gamma, beta), their gradients (dw, db, dgamma, dbeta) and
// the batch-norm statistics are float32 always (the master copies); a half that computes in low
// precision makes its low-precision copy of w itself (kept in the op cache, in its library's
// preferred layout) and accumulates in float32. Per family: conv2d x, y, dy, dx of one dtype;
// linear x and dx of one dtype, y and dy float32 or x's dtype; batch norm, max pool, relu, add: one
// dtype for all activations; global average pool: y [N,C] of x's dtype; softmax_xent, sgd,
// scale_inplace, add_inplace, count_nonfinite: float32.
#include <cstdint>

#include "src/ops/op_cache.hpp"
#include "src/ops/op_shapes.hpp"
#include "base/tensor.hpp"

namespace ht {

/// An op with weights, bias and the oneDNN/cuDNN/cuBLAS three-pass backward: conv2d and linear
/// (shapes and semantics in src/ops/conv2d.hpp and src/ops/linear.hpp).
template <class Shape>
struct WeightedOpHalf {
  void (*forward)(OpCachePtr& cache, const Shape& sh, const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y);
  void (*backward)(OpCachePtr& cache, const Shape& sh, const Tensor& x, const Tensor& w, const Tensor& dy,
                   Tensor* dx, Tensor& dw, Tensor* db, bool accumulate);
};
using Conv2dHalf = WeightedOpHalf<Conv2dShape>;
using LinearHalf = WeightedOpHalf<LinearShape>;
namespace cpu { extern const Conv2dHalf conv2d; }    // src/ops/conv2d_cpu.cpp (oneDNN)
namespace cuda { extern const Conv2dHalf conv2d; }   // src/ops/conv2d_gpu.cu (cuDNN)
namespace cpu { extern const LinearHalf linear; }    // src/ops/linear_cpu.cpp (oneDNN)
namespace cuda { extern const LinearHalf linear; }   // src/ops/linear_gpu.cu (cuBLAS)

/// Batch normalization (src/ops/batchnorm2d.hpp).
struct BatchNormHalf {
  void (*forward_train)(OpCachePtr& cache, const BatchNormShape& sh, const Tensor& x, const Tensor& gamma,
                        const Tensor& beta, Tensor& y, Tensor& running_mean, Tensor& running_var, Tensor& save_mean,
                        Tensor& save_invstd);
  void (*forward_infer)(OpCachePtr& cache, const BatchNormShape& sh, const Tensor& x, const Tensor& gamma,
                        const Tensor& beta, const Tensor& running_mean, const Tensor& running_var, Tensor& y);
  void (*backward)(OpCachePtr& cache, const BatchNormShape& sh, const Tensor& x, const Tensor& dy,
                   const Tensor& gamma, const Tensor& save_mean, const Tensor& save_invstd, Tensor& dx,
                   Tensor& dgamma, Tensor& dbeta, bool accumulate);
};
namespace cpu { extern const BatchNormHalf batchnorm2d; }  // src/ops/batchnorm2d_cpu.cpp (oneDNN)
namespace cuda { extern const BatchNormHalf batchnorm2d; }  // src/ops/batchnorm2d_gpu.cu (cuDNN)

/// Max pooling and global average pooling (src/ops/pool.hpp).
struct PoolHalf {
  void (*maxpool2d_forward)(OpCachePtr& cache, const PoolShape& sh, const Tensor& x, Tensor& y);
  void (*maxpool2d_backward)(OpCachePtr& cache, const PoolShape& sh, const Tensor& x, const Tensor& y,
                             const Tensor& dy, Tensor& dx);
  void (*global_avgpool_forward)(OpCachePtr& cache, const Tensor& x, Tensor& y);
  void (*global_avgpool_backward)(OpCachePtr& cache, const Tensor& dy, Tensor& dx);
};
namespace cpu { extern const PoolHalf pool; }  // src/ops/pool_cpu.cpp (oneDNN max pooling)
namespace cuda { extern const PoolHalf pool; }  // src/ops/pool_gpu.cu
/// Defines the table `pool` of the enclosing namespace (ht::cpu or ht::cuda) from that half's
/// functions of the same names as the fields.
#define HT_DEFINE_POOL_HALF()                                                                            \
  const PoolHalf pool = {.maxpool2d_forward = maxpool2d_forward, .maxpool2d_backward = maxpool2d_backward, \
                         .global_avgpool_forward = global_avgpool_forward,                                 \
                         .global_avgpool_backward = global_avgpool_backward}

/// ReLU, residual add and the trainer's vector helpers (src/ops/elementwise.hpp).
struct ElementwiseHalf {
  void (*relu_forward)(const Tensor& x, Tensor& y);
  void (*relu_backward)(const Tensor& y, const Tensor& dy, Tensor& dx);
  void (*add_forward)(const Tensor& a, const Tensor& b, Tensor& y);
  void (*add_inplace)(Tensor& y, const Tensor& x);
  void (*scale_inplace)(Tensor& y, float s);
  int64_t (*count_nonfinite)(const Tensor& x);
};
namespace cpu { extern const ElementwiseHalf elementwise; }  // src/ops/elementwise_cpu.cpp
namespace cuda { extern const ElementwiseHalf elementwise; }  // src/ops/elementwise_gpu.cu
/// Defines the table `elementwise` of the enclosing namespace (ht::cpu or ht::cuda) from that half's
/// functions of the same names as the fields.
#define HT_DEFINE_ELEMENTWISE_HALF()                                                                          \
  const ElementwiseHalf elementwise = {.relu_forward = relu_forward, .relu_backward = relu_backward,           \
                                       .add_forward = add_forward, .add_inplace = add_inplace,                 \
                                       .scale_inplace = scale_inplace, .count_nonfinite = count_nonfinite}

/// Softmax cross-entropy with label smoothing (src/ops/softmax_xent.hpp).
struct SoftmaxXentHalf {
  double (*forward)(const Tensor& logits, const Tensor& labels, float label_smoothing, Tensor& probs,
                    int64_t* correct);
  void (*backward)(const Tensor& probs, const Tensor& labels, float label_smoothing, float scale, Tensor& dlogits);
};
namespace cpu { extern const SoftmaxXentHalf softmax_xent; }  // src/ops/softmax_xent_cpu.cpp
namespace cuda { extern const SoftmaxXentHalf softmax_xent; }  // src/ops/softmax_xent_gpu.cu

/// Conversion between activation formats (src/ops/convert.hpp): dst = src rounded to dst's dtype
/// (base/bf16.hpp rounding), same logical shape; a 4-D tensor changes memory order with the
/// dtype (float32 NCHW <-> bfloat16/float16 NHWC), other ranks convert element by element.
struct ConvertHalf {
  void (*convert)(const Tensor& src, Tensor& dst);
};
namespace cpu { extern const ConvertHalf convert; }  // src/ops/convert_cpu.cpp (oneDNN reorder)
namespace cuda { extern const ConvertHalf convert; }  // src/ops/convert_gpu.cu

/// The SGD step over one flat parameter buffer (src/ops/sgd_update.hpp).
struct SgdHalf {
  void (*update)(float* p, const float* g, float* buf, int64_t n, float lr, float momentum, float wd, bool nesterov);
};
namespace cpu { extern const SgdHalf sgd; }  // src/ops/sgd_update_cpu.cpp
namespace cuda { extern const SgdHalf sgd; }  // src/ops/sgd_update_gpu.cu

}  // namespace ht
