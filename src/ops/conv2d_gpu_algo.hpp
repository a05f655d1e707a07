#pragma once
// Convolution algorithm selection for the cuDNN legacy API, as plain host logic with no cuDNN types
// so it is unit-tested on the CPU (tests/unit/test_conv_algo.cpp). src/ops/conv2d_gpu.cu converts the
// cudnnConvolution*AlgoPerf_t arrays returned by cudnnFind*Algorithm / cudnnGet*Algorithm_v7 into
// ConvAlgoPerf and calls choose_conv_algo once per (shape, options).
//
// Rules (cuDNN 9 API reference; PyTorch aten/src/ATen/native/cudnn/Conv_v7.cpp does the same):
//  - entries whose status is not CUDNN_STATUS_SUCCESS are skipped (Find/Get return every algorithm,
//    unsupported ones flagged, not omitted);
//  - the result is an (algorithm, math type) pair: the math type must be set on the convolution
//    descriptor (cudnnSetConvolutionMathType) before the workspace query and before every call with
//    that algorithm, or cuDNN runs another kernel than the one timed/sized;
//  - strict FP32 (no TF32): the descriptor stays CUDNN_FMA_MATH; entries reporting tensor-op math are
//    refused. TF32 allowed: the descriptor gets the entry's math type. Math with FP16 conversion
//    (CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) is never used for FP32 data;
//  - bfloat16 and float16 data (NHWC, float32 compute) follow the TF32 rules: src/ops/conv2d_gpu.cu passes
//    allow_tf32 = true for them ("tensor-core math allowed"). ALLOW_CONVERSION stays refused there
//    too: for bfloat16 it would round to float16 (a smaller range), for float16 it adds nothing;
//  - deterministic mode: only entries reported CUDNN_DETERMINISTIC, and never the algorithms cuDNN
//    documents as non-deterministic (backward data ALGO_0, backward filter ALGO_0 and ALGO_3);
//  - the workspace is re-queried for the chosen pair and must fit the cap (Options::workspace_bytes).
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#if defined(HT_HAVE_CUDA)
#include "base/tensor.hpp"
#endif

namespace ht {
struct Conv2dShape;
}

namespace ht::cuda {

enum class ConvPass { forward, backward_data, backward_filter };

/// cudnnMathType_t without cuDNN: DEFAULT_MATH, TENSOR_OP_MATH, TENSOR_OP_MATH_ALLOW_CONVERSION, FMA_MATH.
enum class ConvMath { default_math, tensor_op, tensor_op_allow_conversion, fma };

/// One cudnnConvolution*AlgoPerf_t entry.
struct ConvAlgoPerf {
  int algo = 0;                ///< the cudnnConvolution*Algo_t value
  bool status_ok = false;      ///< status == CUDNN_STATUS_SUCCESS
  size_t memory = 0;           ///< workspace bytes cuDNN reported
  ConvMath math = ConvMath::default_math;
  bool deterministic = false;  ///< determinism == CUDNN_DETERMINISTIC
};

/// The chosen algorithm, the math type to set on the descriptor when running it, and its workspace.
struct ConvAlgoChoice {
  int algo = 0;
  ConvMath math = ConvMath::fma;
  size_t workspace = 0;
};

/// True for the algorithms cuDNN documents as non-deterministic (atomics): backward data ALGO_0 (= 0),
/// backward filter ALGO_0 (= 0) and ALGO_3 (= 3). conv2d_gpu.cu static_asserts these enum values.
bool conv_algo_nondeterministic(ConvPass pass, int algo);

/// The math type the descriptor is given before cudnnFind/cudnnGet: fma in strict FP32, default with
/// TF32, tensor_op for bfloat16/float16 data (`low_precision`), as PyTorch sets CUDNN_TENSOR_OP_MATH for
/// half-precision convolutions so that cuDNN offers its tensor-core kernels first (a speed choice:
/// bf16/fp16 products are exact in the float32 accumulator either way).
ConvMath conv_base_math(bool allow_tf32, bool low_precision = false);

/// The math type to run `p` with, or nullopt when `p` is not usable under this precision policy.
std::optional<ConvMath> conv_run_math(const ConvAlgoPerf& p, bool allow_tf32);

/// Returns the first usable entry of `perfs` (cuDNN's order: fastest first for Find, best first for
/// Get_v7) under the rules above, or nullopt when none is. `workspace_of(algo, math)` re-queries
/// the workspace with that math type set (nullopt when cuDNN refuses the pair).
std::optional<ConvAlgoChoice> choose_conv_algo(
    ConvPass pass, const std::vector<ConvAlgoPerf>& perfs, size_t workspace_cap, bool deterministic, bool allow_tf32,
    const std::function<std::optional<size_t>(int algo, ConvMath math)>& workspace_of);

/// "FMA_MATH" etc., for messages.
const char* conv_math_name(ConvMath m);

/// The error text when choose_conv_algo finds nothing: the pass, the shape, the cap, what each entry
/// was refused for, and the remedies.
std::string no_conv_algo_message(ConvPass pass, const std::string& shape_text, const std::vector<ConvAlgoPerf>& perfs,
                                 size_t workspace_cap, bool deterministic, bool allow_tf32);

#if defined(HT_HAVE_CUDA)
/// The algorithms chosen for `sh` with activations of `dtype` (float32: NCHW; bfloat16, float16:
/// NHWC) under the current options ("forward algo 1 FMA_MATH workspace 0 B; backward-data ...") for
/// test and debug messages (src/ops/conv2d_gpu.cu).
std::string conv2d_algo_text(const Conv2dShape& sh, DType dtype = DType::f32);
#endif

}  // namespace ht::cuda
