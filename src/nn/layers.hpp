#pragma once
// Layers: each owns its parameters (views into the ParamStore), its op caches and its output and
// input-gradient buffers (reused step after step). forward(x) keeps a handle on x for backward;
// backward(dy) returns dx and reports each parameter's gradient as final through the store.
// Activations are NCHW float32, or with PassOptions::compute = bf16 (fp16) low-precision NHWC tensors
// (the formats of src/ops/op.hpp): a layer taking a float32 input in a low-precision pass
// converts it itself (the first convolution, the linear layers), linear layers output float32 (the
// logits stay float32 for the loss), and every layer's dx has the dtype of the x it was given.
#include <memory>
#include <string>
#include <vector>

#include "src/nn/params.hpp"
#include "src/ops/batchnorm2d.hpp"
#include "src/ops/conv2d.hpp"
#include "src/ops/linear.hpp"
#include "src/ops/pool.hpp"

namespace ht {

/// Per-pass options shared by all layers.
struct PassOptions {
  bool training = true;
  bool accumulate = false;  ///< add parameter gradients to the existing ones (micro-batches 2..A)
  bool need_input_grad = true;
  DType compute = DType::f32;  ///< f32, or bf16/f16: convolutions and linear layers in that dtype
};

class Layer {
 public:
  Layer() = default;
  explicit Layer(std::string n) : name(std::move(n)) {}
  virtual ~Layer() = default;
  /// x -> y. The returned tensor is owned by the layer and valid until its next forward.
  virtual const Tensor& forward(const Tensor& x, const PassOptions& o) = 0;
  /// dy -> dx (dx undefined when o.need_input_grad is false). Owned by the layer.
  virtual const Tensor& backward(const Tensor& dy, const PassOptions& o) = 0;
  std::string name;
};

/// What Conv2d and Linear share: a weight and an optional bias in the ParamStore, the input kept for
/// backward, and the low-precision pass's conversion of a float32 input (and of dx back to float32).
class WeightedLayer : public Layer {
 protected:
  /// Registers <name>.weight of `weight_shape` (outputs first) and, with `bias`, <name>.bias of
  /// [weight_shape[0]] in `ps`; `fan_in` and `fan_out` are the weight's, for its initialisation
  /// (ParamStore::add_param; the bias's fan_out is its length).
  WeightedLayer(ParamStore& ps, std::string name, std::vector<int64_t> weight_shape, ParamKind weight_kind, bool bias,
                int64_t fan_in, int64_t fan_out);
  /// Keeps x for backward as the layer computes it: x itself, or (a float32 x in a low-precision
  /// pass) x converted to o.compute. Returns the kept tensor.
  const Tensor& keep_input(const Tensor& x, const PassOptions& o);
  /// Reports the gradients as final and returns dx in the dtype of the input forward was given.
  const Tensor& finish_backward(const PassOptions& o);
  bool has_bias() const { return ib_ >= 0; }

  ParamStore* ps_;
  int iw_ = -1, ib_ = -1;
  Tensor w_, dw_, b_, db_, x_, y_, dx_;
  OpCachePtr cache_;

 private:
  Tensor xl_, dx32_;  // low-precision pass: the converted float32 input, and its gradient back in f32
  bool converted_ = false;
};

/// Conv2d (no bias when bias=false), PyTorch nn.Conv2d. x [N,C,H,W] -> y [N,K,P,Q].
class Conv2d : public WeightedLayer {
 public:
  Conv2d(ParamStore& ps, std::string name, int in_ch, int out_ch, int kernel, int stride, int pad, bool bias);
  const Tensor& forward(const Tensor& x, const PassOptions& o) override;
  const Tensor& backward(const Tensor& dy, const PassOptions& o) override;
  int in_ch, out_ch, kernel, stride, pad;

 private:
  Conv2dShape sh_;
};

/// BatchNorm2d (PyTorch semantics, momentum 0.1, eps 1e-5). Buffers running_mean, running_var.
class BatchNorm2d : public Layer {
 public:
  BatchNorm2d(ParamStore& ps, std::string name, int channels);
  const Tensor& forward(const Tensor& x, const PassOptions& o) override;
  const Tensor& backward(const Tensor& dy, const PassOptions& o) override;

 private:
  ParamStore* ps_;
  int c_, ig_, ib_;
  Tensor gamma_, dgamma_, beta_, dbeta_, rmean_, rvar_, smean_, sinv_, x_, y_, dx_;
  BatchNormShape sh_;
  OpCachePtr cache_;
};

class ReLU : public Layer {
 public:
  using Layer::Layer;  // (std::string name)
  const Tensor& forward(const Tensor& x, const PassOptions& o) override;
  const Tensor& backward(const Tensor& dy, const PassOptions& o) override;

 private:
  Tensor y_, dx_;
};

class MaxPool2d : public Layer {
 public:
  MaxPool2d(std::string name, int kernel, int stride, int pad);
  const Tensor& forward(const Tensor& x, const PassOptions& o) override;
  const Tensor& backward(const Tensor& dy, const PassOptions& o) override;

 private:
  int k_, s_, p_;
  PoolShape sh_;
  Tensor x_, y_, dx_;
  OpCachePtr cache_;
};

/// [N,C,H,W] -> [N,C].
class GlobalAvgPool : public Layer {
 public:
  using Layer::Layer;  // (std::string name)
  const Tensor& forward(const Tensor& x, const PassOptions& o) override;
  const Tensor& backward(const Tensor& dy, const PassOptions& o) override;

 private:
  std::vector<int64_t> in_shape_;
  DType in_dtype_ = DType::f32;
  Tensor y_, dx_;
  OpCachePtr cache_;
};

/// [N, ...] -> [N, prod(...)] in NCHW order (a view, no copy, for float32; a low-precision NHWC
/// input is converted to float32 NCHW first, so the features keep torchvision's order).
class Flatten : public Layer {
 public:
  using Layer::Layer;  // (std::string name)
  const Tensor& forward(const Tensor& x, const PassOptions& o) override;
  const Tensor& backward(const Tensor& dy, const PassOptions& o) override;

 private:
  std::vector<int64_t> in_shape_;
  DType in_dtype_ = DType::f32;
  Tensor y_, dx_, x32_, dxl_;
};

/// nn.Linear: [N,in] -> [N,out].
class Linear : public WeightedLayer {
 public:
  Linear(ParamStore& ps, std::string name, int in, int out, bool bias = true);
  const Tensor& forward(const Tensor& x, const PassOptions& o) override;
  const Tensor& backward(const Tensor& dy, const PassOptions& o) override;
  int in, out;
};

/// Layers applied in order.
class Sequential : public Layer {
 public:
  using Layer::Layer;  // (std::string name)
  template <class L, class... A> L& add(A&&... args) {
    auto p = std::make_unique<L>(std::forward<A>(args)...);
    L& r = *p;
    layers.push_back(std::move(p));
    return r;
  }
  const Tensor& forward(const Tensor& x, const PassOptions& o) override;
  const Tensor& backward(const Tensor& dy, const PassOptions& o) override;
  std::vector<std::unique_ptr<Layer>> layers;
};

/// A residual block: out_relu(main(x) + shortcut(x)), shortcut = downsample (1x1 conv stride s + bn)
/// when the shape changes, identity otherwise. Subclasses build main (and the shortcut) in their
/// constructor with add_conv_bn and add_shortcut; parameters register in the order they are added.
class ResidualBlock : public Layer {
 public:
  const Tensor& forward(const Tensor& x, const PassOptions& o) override;
  const Tensor& backward(const Tensor& dy, const PassOptions& o) override;

 protected:
  explicit ResidualBlock(std::string n);
  /// Appends <name>.conv<i> (k x k, stride s, pad p, no bias) and <name>.bn<i> to main.
  void add_conv_bn(ParamStore& ps, int i, int in_ch, int out_ch, int k, int s, int p);
  /// Adds the downsample shortcut (<name>.downsample.{0,1}) when stride != 1 or in_ch != out_ch.
  void add_shortcut(ParamStore& ps, int in_ch, int out_ch, int stride);
  Sequential main_;

 private:
  std::unique_ptr<Sequential> down_;
  ReLU out_relu_;
  Tensor sum_, dx_;
};

/// torchvision BasicBlock: relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)).
class BasicBlock : public ResidualBlock {
 public:
  BasicBlock(ParamStore& ps, std::string name, int in_ch, int out_ch, int stride);
};

/// torchvision Bottleneck (ResNet v1.5: stride on the 3x3 conv), expansion 4.
class Bottleneck : public ResidualBlock {
 public:
  Bottleneck(ParamStore& ps, std::string name, int in_ch, int width, int stride);
};

}  // namespace ht
