#include "src/nn/layers.hpp"

#include <optional>

#include "cuda/allocator.hpp"
#include "src/ops/convert.hpp"
#include "src/ops/elementwise.hpp"

namespace ht {

// ---- WeightedLayer (Conv2d, Linear) --------------------------------------------------------------
WeightedLayer::WeightedLayer(ParamStore& ps, std::string n, std::vector<int64_t> weight_shape, ParamKind weight_kind,
                             bool bias, int64_t fan_in, int64_t fan_out)
    : Layer(std::move(n)), ps_(&ps) {
  const int64_t outputs = weight_shape[0];
  iw_ = ps.add_param(name + ".weight", std::move(weight_shape), weight_kind, fan_in, fan_out, &w_, &dw_);
  if (bias) ib_ = ps.add_param(name + ".bias", {outputs}, ParamKind::bias, fan_in, outputs, &b_, &db_);
}

const Tensor& WeightedLayer::keep_input(const Tensor& x, const PassOptions& o) {
  converted_ = o.compute != DType::f32 && x.dtype() == DType::f32;
  if (converted_) {
    xl_.ensure(x.shape(), o.compute, x.device());
    convert_tensor(x, xl_);
  }
  x_ = converted_ ? xl_ : x;
  return x_;
}

const Tensor& WeightedLayer::finish_backward(const PassOptions& o) {
  if (has_bias()) ps_->grad_ready(ib_);
  ps_->grad_ready(iw_);
  if (!o.need_input_grad || !converted_) return dx_;
  dx32_.ensure(dx_.shape(), DType::f32, dx_.device());
  convert_tensor(dx_, dx32_);
  return dx32_;
}

// ---- Conv2d -------------------------------------------------------------------------------------
Conv2d::Conv2d(ParamStore& ps, std::string n, int ic, int oc, int k, int s, int p, bool bias)
    : WeightedLayer(ps, std::move(n), {oc, ic, k, k}, ParamKind::conv_weight, bias, int64_t{ic} * k * k,
                    int64_t{oc} * k * k),
      in_ch(ic), out_ch(oc), kernel(k), stride(s), pad(p) {}

const Tensor& Conv2d::forward(const Tensor& x, const PassOptions& o) {
  keep_input(x, o);
  sh_ = Conv2dShape{static_cast<int>(x.dim(0)), static_cast<int>(x.dim(1)), static_cast<int>(x.dim(2)),
                    static_cast<int>(x.dim(3)), out_ch, kernel, kernel, stride, pad};
  y_.ensure({sh_.n, out_ch, sh_.p(), sh_.q()}, x_.dtype(), x.device());
  conv2d_forward(cache_, sh_, x_, w_, has_bias() ? &b_ : nullptr, y_);
  return y_;
}

const Tensor& Conv2d::backward(const Tensor& dy, const PassOptions& o) {
  if (o.need_input_grad) dx_.ensure(x_.shape(), x_.dtype(), x_.device());
  conv2d_backward(cache_, sh_, x_, w_, dy, o.need_input_grad ? &dx_ : nullptr, dw_, has_bias() ? &db_ : nullptr,
                  o.accumulate);
  return finish_backward(o);
}

// ---- BatchNorm2d --------------------------------------------------------------------------------
BatchNorm2d::BatchNorm2d(ParamStore& ps, std::string n, int c) : ps_(&ps), c_(c) {
  name = std::move(n);
  ig_ = ps.add_param(name + ".weight", {c}, ParamKind::bn_weight, c, c, &gamma_, &dgamma_);
  ib_ = ps.add_param(name + ".bias", {c}, ParamKind::bn_bias, c, c, &beta_, &dbeta_);
  ps.add_buffer(name + ".running_mean", {c}, 0.f, &rmean_);
  ps.add_buffer(name + ".running_var", {c}, 1.f, &rvar_);
}

const Tensor& BatchNorm2d::forward(const Tensor& x, const PassOptions& o) {
  x_ = x;
  sh_.n = static_cast<int>(x.dim(0));
  sh_.c = c_;
  sh_.h = static_cast<int>(x.dim(2));
  sh_.w = static_cast<int>(x.dim(3));
  y_.ensure(x.shape(), x.dtype(), x.device());
  if (o.training) {
    smean_.ensure({c_}, DType::f32, x.device());
    sinv_.ensure({c_}, DType::f32, x.device());
    batchnorm2d_forward_train(cache_, sh_, x, gamma_, beta_, y_, rmean_, rvar_, smean_, sinv_);
  } else {
    batchnorm2d_forward_infer(cache_, sh_, x, gamma_, beta_, rmean_, rvar_, y_);
  }
  return y_;
}

const Tensor& BatchNorm2d::backward(const Tensor& dy, const PassOptions& o) {
  dx_.ensure(x_.shape(), x_.dtype(), x_.device());
  batchnorm2d_backward(cache_, sh_, x_, dy, gamma_, smean_, sinv_, dx_, dgamma_, dbeta_, o.accumulate);
  ps_->grad_ready(ib_);
  ps_->grad_ready(ig_);
  return dx_;
}

// ---- ReLU ---------------------------------------------------------------------------------------
const Tensor& ReLU::forward(const Tensor& x, const PassOptions&) {
  y_.ensure(x.shape(), x.dtype(), x.device());
  relu_forward(x, y_);
  return y_;
}

const Tensor& ReLU::backward(const Tensor& dy, const PassOptions&) {
  dx_.ensure(y_.shape(), y_.dtype(), y_.device());
  relu_backward(y_, dy, dx_);
  return dx_;
}

// ---- MaxPool2d ----------------------------------------------------------------------------------
MaxPool2d::MaxPool2d(std::string n, int k, int s, int p) : k_(k), s_(s), p_(p) { name = std::move(n); }

const Tensor& MaxPool2d::forward(const Tensor& x, const PassOptions&) {
  x_ = x;
  sh_ = PoolShape{static_cast<int>(x.dim(0)), static_cast<int>(x.dim(1)), static_cast<int>(x.dim(2)),
                  static_cast<int>(x.dim(3)), k_, s_, p_};
  y_.ensure({sh_.n, sh_.c, sh_.p(), sh_.q()}, x.dtype(), x.device());
  maxpool2d_forward(cache_, sh_, x, y_);
  return y_;
}

const Tensor& MaxPool2d::backward(const Tensor& dy, const PassOptions&) {
  dx_.ensure(x_.shape(), x_.dtype(), x_.device());
  maxpool2d_backward(cache_, sh_, x_, y_, dy, dx_);
  return dx_;
}

// ---- GlobalAvgPool / Flatten --------------------------------------------------------------------
const Tensor& GlobalAvgPool::forward(const Tensor& x, const PassOptions&) {
  in_shape_ = x.shape();
  in_dtype_ = x.dtype();
  y_.ensure({x.dim(0), x.dim(1)}, x.dtype(), x.device());
  global_avgpool_forward(cache_, x, y_);
  return y_;
}

const Tensor& GlobalAvgPool::backward(const Tensor& dy, const PassOptions&) {
  dx_.ensure(in_shape_, in_dtype_, dy.device());
  global_avgpool_backward(cache_, dy, dx_);
  return dx_;
}

const Tensor& Flatten::forward(const Tensor& x, const PassOptions&) {
  in_shape_ = x.shape();
  in_dtype_ = x.dtype();
  const Tensor* src = &x;
  if (x.dtype() != DType::f32 && x.ndim() == 4) {  // NHWC: back to NCHW order (float32)
    x32_.ensure(x.shape(), DType::f32, x.device());
    convert_tensor(x, x32_);
    src = &x32_;
  }
  y_ = src->view({x.dim(0), x.numel() / x.dim(0)});
  return y_;
}

const Tensor& Flatten::backward(const Tensor& dy, const PassOptions&) {
  dx_ = dy.view(in_shape_);
  if (in_dtype_ != dx_.dtype()) {
    dxl_.ensure(in_shape_, in_dtype_, dy.device());
    convert_tensor(dx_, dxl_);
    return dxl_;
  }
  return dx_;
}

// ---- Linear -------------------------------------------------------------------------------------
Linear::Linear(ParamStore& ps, std::string n, int i, int o, bool bias)
    : WeightedLayer(ps, std::move(n), {o, i}, ParamKind::linear_weight, bias, i, o),
      in(i), out(o) {}

const Tensor& Linear::forward(const Tensor& x, const PassOptions& o) {
  keep_input(x, o);
  y_.ensure({x.dim(0), out}, DType::f32, x.device());
  linear_forward(cache_, LinearShape{static_cast<int>(x.dim(0)), in, out}, x_, w_, has_bias() ? &b_ : nullptr, y_);
  return y_;
}

const Tensor& Linear::backward(const Tensor& dy, const PassOptions& o) {
  if (o.need_input_grad) dx_.ensure(x_.shape(), x_.dtype(), x_.device());
  linear_backward(cache_, LinearShape{static_cast<int>(x_.dim(0)), in, out}, x_, w_, dy,
                  o.need_input_grad ? &dx_ : nullptr, dw_, has_bias() ? &db_ : nullptr, o.accumulate);
  return finish_backward(o);
}

// ---- Sequential ---------------------------------------------------------------------------------
// On the GPU each layer runs under a CurrentLayer guard, so an out-of-memory error names the layer.
const Tensor& Sequential::forward(const Tensor& x, const PassOptions& o) {
  const Tensor* cur = &x;
  const bool gpu = x.device() == Device::cuda;
  for (auto& l : layers) {
    std::optional<cuda::CurrentLayer> guard;
    if (gpu) guard.emplace(l->name);
    cur = &l->forward(*cur, o);
  }
  return *cur;
}

const Tensor& Sequential::backward(const Tensor& dy, const PassOptions& o) {
  const Tensor* cur = &dy;
  PassOptions inner = o;
  const bool gpu = dy.device() == Device::cuda;
  for (size_t i = layers.size(); i-- > 0;) {
    inner.need_input_grad = i > 0 ? true : o.need_input_grad;
    std::optional<cuda::CurrentLayer> guard;
    if (gpu) guard.emplace(layers[i]->name + " (backward)");
    cur = &layers[i]->backward(*cur, inner);
  }
  return *cur;
}

// ---- Residual blocks ----------------------------------------------------------------------------
ResidualBlock::ResidualBlock(std::string n) : main_(n), out_relu_(n + ".relu_out") { name = std::move(n); }

void ResidualBlock::add_conv_bn(ParamStore& ps, int i, int in_ch, int out_ch, int k, int s, int p) {
  main_.add<Conv2d>(ps, name + ".conv" + std::to_string(i), in_ch, out_ch, k, s, p, false);
  main_.add<BatchNorm2d>(ps, name + ".bn" + std::to_string(i), out_ch);
}

void ResidualBlock::add_shortcut(ParamStore& ps, int in_ch, int out_ch, int stride) {
  if (stride == 1 && in_ch == out_ch) return;
  down_ = std::make_unique<Sequential>(name + ".downsample");
  down_->add<Conv2d>(ps, name + ".downsample.0", in_ch, out_ch, 1, stride, 0, false);
  down_->add<BatchNorm2d>(ps, name + ".downsample.1", out_ch);
}

const Tensor& ResidualBlock::forward(const Tensor& x, const PassOptions& o) {
  const Tensor& m = main_.forward(x, o);
  const Tensor& s = down_ ? down_->forward(x, o) : x;
  sum_.ensure(m.shape(), m.dtype(), m.device());
  add_forward(m, s, sum_);
  return out_relu_.forward(sum_, o);
}

// The shortcut goes first so that gradients become final in reverse registration order, which
// lets the gradient buckets start as early as possible.
const Tensor& ResidualBlock::backward(const Tensor& dy, const PassOptions& o) {
  const Tensor& ds = out_relu_.backward(dy, o);
  PassOptions inner = o;
  inner.need_input_grad = true;
  const Tensor& dd = down_ ? down_->backward(ds, inner) : ds;
  const Tensor& dm = main_.backward(ds, inner);
  dx_.ensure(dm.shape(), dm.dtype(), dm.device());
  add_forward(dm, dd, dx_);
  return dx_;
}

BasicBlock::BasicBlock(ParamStore& ps, std::string n, int in_ch, int out_ch, int stride) : ResidualBlock(std::move(n)) {
  add_conv_bn(ps, 1, in_ch, out_ch, 3, stride, 1);
  main_.add<ReLU>(name + ".relu");
  add_conv_bn(ps, 2, out_ch, out_ch, 3, 1, 1);
  add_shortcut(ps, in_ch, out_ch, stride);
}

Bottleneck::Bottleneck(ParamStore& ps, std::string n, int in_ch, int width, int stride) : ResidualBlock(std::move(n)) {
  const int out_ch = width * 4;
  add_conv_bn(ps, 1, in_ch, width, 1, 1, 0);
  main_.add<ReLU>(name + ".relu1");
  add_conv_bn(ps, 2, width, width, 3, stride, 1);
  main_.add<ReLU>(name + ".relu2");
  add_conv_bn(ps, 3, width, out_ch, 1, 1, 0);
  add_shortcut(ps, in_ch, out_ch, stride);
}

}  // namespace ht
