#include "src/nn/params.hpp"

#include <cmath>
#include <random>

namespace ht {

int ParamStore::add_param(std::string name, std::vector<int64_t> shape, ParamKind kind, int64_t fan_in,
                          int64_t fan_out, Tensor* value, Tensor* grad) {
  ParamEntry e;
  e.name = std::move(name);
  e.shape = std::move(shape);
  e.kind = kind;
  e.fan_in = fan_in;
  e.fan_out = fan_out;
  e.value = value;
  e.grad = grad;
  params_.push_back(std::move(e));
  return static_cast<int>(params_.size()) - 1;
}

void ParamStore::add_buffer(std::string name, std::vector<int64_t> shape, float init, Tensor* value) {
  buffers_.push_back(BufferEntry{std::move(name), std::move(shape), init, 0, value});
}

void ParamStore::finalize(Device device, uint64_t seed) {
  int64_t n = 0;
  for (auto& p : params_) {
    p.offset = n;
    n += shape_numel(p.shape);
  }
  int64_t nb = 0;
  for (auto& b : buffers_) {
    b.offset = nb;
    nb += shape_numel(b.shape);
  }
  // Initialise on the host, then copy once to the device.
  Tensor host = Tensor::empty({n});
  float* v = host.data<float>();
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& p = params_[i];
    std::mt19937_64 gen(seed * 1000003ull + i);
    int64_t cnt = shape_numel(p.shape);
    float* d = v + p.offset;
    switch (p.kind) {
      case ParamKind::conv_weight: {  // kaiming_normal_(mode="fan_out", nonlinearity="relu")
        std::normal_distribution<double> nd(0.0, std::sqrt(2.0 / static_cast<double>(p.fan_out)));
        for (int64_t j = 0; j < cnt; ++j) d[j] = static_cast<float>(nd(gen));
        break;
      }
      case ParamKind::linear_weight:
      case ParamKind::bias: {  // nn.Linear default: uniform(-1/sqrt(fan_in), 1/sqrt(fan_in))
        double bound = 1.0 / std::sqrt(static_cast<double>(p.fan_in));
        std::uniform_real_distribution<double> ud(-bound, bound);
        for (int64_t j = 0; j < cnt; ++j) d[j] = static_cast<float>(ud(gen));
        break;
      }
      case ParamKind::bn_weight:
        for (int64_t j = 0; j < cnt; ++j) d[j] = 1.f;
        break;
      case ParamKind::bn_bias:
        for (int64_t j = 0; j < cnt; ++j) d[j] = 0.f;
        break;
    }
  }
  values_ = device == Device::cpu ? host : host.to(device);
  grads_ = Tensor::zeros({n}, DType::f32, device);
  Tensor hb = Tensor::empty({std::max<int64_t>(nb, 1)});
  for (const auto& b : buffers_)
    for (int64_t j = 0; j < shape_numel(b.shape); ++j) hb.data<float>()[b.offset + j] = b.init;
  bufs_ = device == Device::cpu ? hb : hb.to(device);
  for (auto& p : params_) {
    *p.value = values_.slice_flat(p.offset, p.shape);
    *p.grad = grads_.slice_flat(p.offset, p.shape);
  }
  for (auto& b : buffers_) *b.value = bufs_.slice_flat(b.offset, b.shape);
}

}  // namespace ht
