#pragma once
// Models built by name (config model.name):
//   fmnist_cnn      conv3x3(32)-BN-ReLU-maxpool2, conv3x3(64)-BN-ReLU-maxpool2, linear(128)-ReLU, linear(classes)
//   resnet18_cifar  ResNet-18 (He et al. 2016) with a 3x3 stride-1 stem and no max pool (11.2M params for 10 classes)
//   resnet18        torchvision layout: 7x7 stride-2 stem and 3x3 max pool, so torchvision weights map by name
//   resnet50        torchvision layout (Bottleneck, v1.5), for node benchmarks at 224x224
//   mlp             flatten, linear(hidden)-ReLU, linear(hidden)-ReLU, linear(classes); no batch norm (exactness tests)
// Input NCHW float32 [N, C, H, W]; output logits [N, classes]. Parameter names are torchvision's.
#include <memory>
#include <string>

#include "src/nn/layers.hpp"

namespace ht {

struct ModelSpec {
  std::string name = "fmnist_cnn";
  int num_classes = 10;
  int channels = 1, height = 28, width = 28;
  int mlp_hidden = 64;
  /// The dtype convolutions and linear layers compute in (train.precision): f32, or bf16/f16 with
  /// float32 master weights, low-precision NHWC activations and float32 logits (docs/precision.md).
  DType compute = DType::f32;
};

class Model {
 public:
  /// Builds the model on `device` with parameters initialised from `seed`. Throws UsageError for an
  /// unknown name or an input too small for the model.
  Model(const ModelSpec& spec, Device device, uint64_t seed);
  /// x [N,C,H,W] -> logits [N,classes] (owned by the model).
  /// The pass runs in spec().compute whatever o.compute says.
  const Tensor& forward(const Tensor& x, const PassOptions& o);
  /// dlogits -> parameter gradients (into params().flat_grads()); no input gradient.
  void backward(const Tensor& dlogits, const PassOptions& o);
  ParamStore& params() { return ps_; }
  const ModelSpec& spec() const { return spec_; }
  Device device() const { return device_; }
  /// Index of the last linear layer's parameters (the "head"), for --reset-head.
  std::vector<int> head_param_indices() const;

 private:
  ModelSpec spec_;
  Device device_;
  ParamStore ps_;
  Sequential net_{"net"};
};

}  // namespace ht
