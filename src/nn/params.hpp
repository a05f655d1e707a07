#pragma once
// ParamStore: every trainable parameter and every buffer of a model lives in one flat float32
// buffer (values, gradients, buffers), and each layer's tensors are views into it. One flat buffer
// makes broadcast, gradient buckets, the optimizer update and checkpoints single contiguous passes.
// Names follow torchvision's state_dict (conv1.weight, layer1.0.bn1.running_mean, fc.bias, ...).
#include <functional>
#include <string>
#include <vector>

#include "base/tensor.hpp"

namespace ht {

/// How a parameter is initialised and whether weight decay may be skipped for it.
enum class ParamKind { conv_weight, linear_weight, bias, bn_weight, bn_bias };

struct ParamEntry {
  std::string name;
  std::vector<int64_t> shape;
  ParamKind kind;
  int64_t fan_in = 1, fan_out = 1;
  int64_t offset = 0;  ///< in the flat buffer (floats)
  Tensor* value = nullptr;
  Tensor* grad = nullptr;
};

struct BufferEntry {
  std::string name;
  std::vector<int64_t> shape;
  float init = 0.f;
  int64_t offset = 0;
  Tensor* value = nullptr;
};

class ParamStore {
 public:
  /// Declares a parameter; `value`/`grad` are bound to views at finalize(). Returns its index.
  int add_param(std::string name, std::vector<int64_t> shape, ParamKind kind, int64_t fan_in, int64_t fan_out,
                Tensor* value, Tensor* grad);
  /// Declares a buffer (e.g. BatchNorm running statistics) with a constant initial value.
  void add_buffer(std::string name, std::vector<int64_t> shape, float init, Tensor* value);
  /// Allocates the flat buffers on `device`, binds every view and initialises parameters from
  /// `seed` (torchvision's schemes: Kaiming-normal fan_out for convolutions, PyTorch's default
  /// uniform(+-1/sqrt(fan_in)) for linear layers, ones/zeros for batch norm).
  void finalize(Device device, uint64_t seed);

  const std::vector<ParamEntry>& params() const { return params_; }
  const std::vector<BufferEntry>& buffers() const { return buffers_; }
  Tensor& flat_values() { return values_; }
  Tensor& flat_grads() { return grads_; }
  Tensor& flat_buffers() { return bufs_; }
  int64_t num_params() const { return values_.defined() ? values_.numel() : 0; }

  /// Called by layers when a parameter's gradient for this backward pass is final.
  void grad_ready(int index) const {
    if (on_grad_ready) on_grad_ready(index);
  }
  std::function<void(int)> on_grad_ready;

 private:
  std::vector<ParamEntry> params_;
  std::vector<BufferEntry> buffers_;
  Tensor values_, grads_, bufs_;
};

}  // namespace ht
