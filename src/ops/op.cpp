#include "src/ops/op.hpp"

namespace ht {

OpArgs::OpArgs(const char* op, const Tensor& first) : dev_(first.defined() ? first.device() : Device::cpu) {
  op_ = std::string(op) + "(" + device_name(dev_) + ")";
}

const OpArgs& OpArgs::require(bool ok, const std::string& what) const {
  if (!ok) throw RuntimeError(op_ + ": " + what);
  return *this;
}

const OpArgs& OpArgs::on_device(const Tensor& t, const char* name) const {
  require(t.defined(), std::string(name) + " is undefined");
  return require(t.device() == dev_, std::string(name) + " is on " + device_name(t.device()) + ", expected " +
                                         device_name(dev_));
}

const OpArgs& OpArgs::f32(const Tensor& t, const char* name) const {
  on_device(t, name);
  return require(t.dtype() == DType::f32,
                 std::string(name) + " has dtype " + dtype_name(t.dtype()) + ", expected float32");
}

const OpArgs& OpArgs::f32(const Tensor& t, const char* name, const std::vector<int64_t>& shape) const {
  f32(t, name);
  return require(t.shape() == shape,
                 std::string(name) + " has shape " + t.shape_str() + ", expected " + shape_to_string(shape));
}

const OpArgs& OpArgs::i32(const Tensor& t, const char* name) const {
  on_device(t, name);
  return require(t.dtype() == DType::i32, std::string(name) + " has dtype " + dtype_name(t.dtype()) + ", expected int32");
}

const OpArgs& OpArgs::same_numel(const Tensor& a, const char* na, const Tensor& b, const char* nb) const {
  return require(a.numel() == b.numel(),
                 std::string(na) + " " + a.shape_str() + " and " + nb + " " + b.shape_str() + " differ in size");
}

}  // namespace ht
