// Activation formats and the cuDNN data types of the dtypes (src/ops/gpu_common.cuh).
#include "src/ops/gpu_common.cuh"

namespace ht::cuda {

ActFormat act_format(const Tensor& x) {
  const DType t = x.dtype();
  return ActFormat{t, (t == DType::bf16 || t == DType::f16) && x.ndim() == 4};
}

cudnnDataType_t cudnn_type(DType t) {
  switch (t) {
    case DType::f32: return CUDNN_DATA_FLOAT;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    case DType::f16: return CUDNN_DATA_HALF;
    default: break;
  }
  throw RuntimeError(std::string("cuDNN: no activation data type for dtype ") + dtype_name(t));
}

}  // namespace ht::cuda
