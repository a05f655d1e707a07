#include "src/ops/convert.hpp"

namespace ht {

void convert_tensor(const Tensor& src, Tensor& dst) {
  const OpArgs a("convert_tensor", src);
  a.act(src, "src").act(dst, "dst", src.shape());
  if (a.device() == Device::cpu) return convert_tensor_cpu(src, dst);
#if defined(HT_HAVE_CUDA)
  return convert_tensor_gpu(src, dst);
#else
  no_cuda("convert_tensor");
#endif
}

}  // namespace ht
