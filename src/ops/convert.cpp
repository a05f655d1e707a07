#include "src/ops/convert.hpp"

namespace ht {

void convert_tensor(const Tensor& src, Tensor& dst) {
  const OpArgs a("convert_tensor", src);
  a.act(src, "src").act(dst, "dst", src.shape());
  HT_DISPATCH(a.device(), "convert_tensor", convert.convert, src, dst);
}

}  // namespace ht
