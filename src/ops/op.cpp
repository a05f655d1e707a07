#include "src/ops/op.hpp"

namespace ht {

OpArgs::OpArgs(const char* op, const Tensor& first)
    : op_(op), dev_(first.defined() ? first.device() : Device::cpu) {}

void OpArgs::fail(const std::string& what) const {
  throw RuntimeError(std::string(op_) + "(" + device_name(dev_) + "): " + what);
}

const OpArgs& OpArgs::on_device(const Tensor& t, const char* name) const {
  if (!t.defined()) fail(std::string(name) + " is undefined");
  if (t.device() != dev_)
    fail(std::string(name) + " is on " + device_name(t.device()) + ", expected " + device_name(dev_));
  return *this;
}

const OpArgs& OpArgs::f32(const Tensor& t, const char* name) const {
  on_device(t, name);
  if (t.dtype() != DType::f32) fail(std::string(name) + " has dtype " + dtype_name(t.dtype()) + ", expected float32");
  return *this;
}

const OpArgs& OpArgs::has_shape(const Tensor& t, const char* name, const std::vector<int64_t>& shape) const {
  if (t.shape() != shape)
    fail(std::string(name) + " has shape " + t.shape_str() + ", expected " + shape_to_string(shape));
  return *this;
}

const OpArgs& OpArgs::f32(const Tensor& t, const char* name, const std::vector<int64_t>& shape) const {
  return f32(t, name).has_shape(t, name, shape);
}

const OpArgs& OpArgs::act(const Tensor& t, const char* name) const {
  on_device(t, name);
  const DType d = t.dtype();
  if (d != DType::f32 && d != DType::bf16 && d != DType::f16)
    fail(std::string(name) + " has dtype " + dtype_name(d) + ", expected float32, bfloat16 or float16");
  return *this;
}

const OpArgs& OpArgs::act(const Tensor& t, const char* name, const std::vector<int64_t>& shape) const {
  return act(t, name).has_shape(t, name, shape);
}

const OpArgs& OpArgs::same_dtype(const Tensor& a, const char* na, const Tensor& b, const char* nb) const {
  if (a.dtype() != b.dtype())
    fail(std::string(na) + " is " + dtype_name(a.dtype()) + " but " + nb + " is " + dtype_name(b.dtype()));
  return *this;
}

const OpArgs& OpArgs::i32(const Tensor& t, const char* name) const {
  on_device(t, name);
  if (t.dtype() != DType::i32) fail(std::string(name) + " has dtype " + dtype_name(t.dtype()) + ", expected int32");
  return *this;
}

const OpArgs& OpArgs::same_numel(const Tensor& a, const char* na, const Tensor& b, const char* nb) const {
  if (a.numel() != b.numel())
    fail(std::string(na) + " " + a.shape_str() + " and " + nb + " " + b.shape_str() + " differ in size");
  return *this;
}

}  // namespace ht
