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

}  // namespace ht
