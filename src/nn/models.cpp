#include "src/nn/models.hpp"

namespace ht {

namespace {

void add_resnet_stages(Sequential& net, ParamStore& ps, bool bottleneck, const int blocks[4], int& in_ch) {
  const int widths[4] = {64, 128, 256, 512};
  for (int s = 0; s < 4; ++s) {
    for (int b = 0; b < blocks[s]; ++b) {
      const int stride = (s > 0 && b == 0) ? 2 : 1;
      const std::string n = "layer" + std::to_string(s + 1) + "." + std::to_string(b);
      if (bottleneck) {
        net.add<Bottleneck>(ps, n, in_ch, widths[s], stride);
        in_ch = widths[s] * 4;
      } else {
        net.add<BasicBlock>(ps, n, in_ch, widths[s], stride);
        in_ch = widths[s];
      }
    }
  }
}

}  // namespace

Model::Model(const ModelSpec& spec, Device device, uint64_t seed) : spec_(spec), device_(device) {
  const int C = spec.channels, H = spec.height, W = spec.width, K = spec.num_classes;
  if (K < 2) throw UsageError("model.num_classes = " + std::to_string(K) + ": needs at least 2 classes");
  if (spec.name == "fmnist_cnn") {
    if (H < 4 || W < 4) throw UsageError("model fmnist_cnn needs inputs of at least 4x4");
    net_.add<Conv2d>(ps_, "conv1", C, 32, 3, 1, 1, false);
    net_.add<BatchNorm2d>(ps_, "bn1", 32);
    net_.add<ReLU>("relu1");
    net_.add<MaxPool2d>("pool1", 2, 2, 0);
    net_.add<Conv2d>(ps_, "conv2", 32, 64, 3, 1, 1, false);
    net_.add<BatchNorm2d>(ps_, "bn2", 64);
    net_.add<ReLU>("relu2");
    net_.add<MaxPool2d>("pool2", 2, 2, 0);
    net_.add<Flatten>("flatten");
    net_.add<Linear>(ps_, "fc1", 64 * (H / 4) * (W / 4), 128);
    net_.add<ReLU>("relu3");
    net_.add<Linear>(ps_, "fc2", 128, K);
  } else if (spec.name == "resnet18_cifar" || spec.name == "resnet18" || spec.name == "resnet50") {
    const bool cifar = spec.name == "resnet18_cifar";
    const bool bottleneck = spec.name == "resnet50";
    if (cifar) {
      net_.add<Conv2d>(ps_, "conv1", C, 64, 3, 1, 1, false);
    } else {
      net_.add<Conv2d>(ps_, "conv1", C, 64, 7, 2, 3, false);
    }
    net_.add<BatchNorm2d>(ps_, "bn1", 64);
    net_.add<ReLU>("relu");
    if (!cifar) net_.add<MaxPool2d>("maxpool", 3, 2, 1);
    const int basic[4] = {2, 2, 2, 2}, bottle[4] = {3, 4, 6, 3};
    int in_ch = 64;
    add_resnet_stages(net_, ps_, bottleneck, bottleneck ? bottle : basic, in_ch);
    net_.add<GlobalAvgPool>("avgpool");
    net_.add<Linear>(ps_, "fc", in_ch, K);
  } else if (spec.name == "mlp") {
    const int hidden = spec.mlp_hidden;
    net_.add<Flatten>("flatten");
    net_.add<Linear>(ps_, "fc1", C * H * W, hidden);
    net_.add<ReLU>("relu1");
    net_.add<Linear>(ps_, "fc2", hidden, hidden);
    net_.add<ReLU>("relu2");
    net_.add<Linear>(ps_, "fc3", hidden, K);
  } else {
    throw UsageError("model.name = " + spec.name + ": unknown model (fmnist_cnn, resnet18_cifar, resnet18, resnet50, mlp)");
  }
  ps_.finalize(device, seed);
}

const Tensor& Model::forward(const Tensor& x, const PassOptions& o) {
  PassOptions f = o;
  f.compute = spec_.compute;
  return net_.forward(x, f);
}

void Model::backward(const Tensor& dlogits, const PassOptions& o) {
  PassOptions b = o;
  b.need_input_grad = false;  // the input is the batch: nothing upstream needs its gradient
  b.compute = spec_.compute;
  net_.backward(dlogits, b);
}

std::vector<int> Model::head_param_indices() const {
  std::vector<int> idx;
  const auto& p = ps_.params();
  // The head is the last linear layer: its weight and bias are the last two parameters.
  for (int i = static_cast<int>(p.size()) - 1; i >= 0; --i) {
    if (p[static_cast<size_t>(i)].kind == ParamKind::linear_weight) {
      idx.push_back(i);
      if (i + 1 < static_cast<int>(p.size()) && p[static_cast<size_t>(i + 1)].kind == ParamKind::bias) idx.push_back(i + 1);
      break;
    }
  }
  return idx;
}

}  // namespace ht
