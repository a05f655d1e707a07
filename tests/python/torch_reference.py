#!/usr/bin/python3
"""Writes a PyTorch reference for our models to HDF5: weights, a fixed input batch, labels, and
PyTorch's logits, loss, every parameter's gradient and the BatchNorm running statistics after one
training-mode forward pass. tests/unit/test_torch_crosscheck.cpp runs our forward and backward on
the same weights and compares.

usage: torch_reference.py OUT.h5 MODEL   (MODEL: resnet18_cifar, resnet18, fmnist_cnn, mlp)
"""
import sys

import h5py
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision


def resnet18_cifar(num_classes):
    """Our resnet18_cifar in PyTorch: torchvision ResNet-18 with a 3x3 stride-1 stem, no max pool."""
    m = torchvision.models.resnet18(num_classes=num_classes)
    m.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
    m.maxpool = nn.Identity()
    return m


class FmnistCnn(nn.Module):
    def __init__(self, c, h, w, k):
        super().__init__()
        self.conv1 = nn.Conv2d(c, 32, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(32)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(64)
        self.fc1 = nn.Linear(64 * (h // 4) * (w // 4), 128)
        self.fc2 = nn.Linear(128, k)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc2(F.relu(self.fc1(torch.flatten(x, 1))))


class Mlp(nn.Module):
    def __init__(self, d, hidden, k):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(d, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, k)

    def forward(self, x):
        x = torch.flatten(x, 1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def main():
    out, name = sys.argv[1], sys.argv[2]
    torch.manual_seed(1234)
    k = 10
    if name == "resnet18_cifar":
        model, shape = resnet18_cifar(k), (4, 3, 32, 32)
    elif name == "resnet18":
        model, shape = torchvision.models.resnet18(num_classes=k), (2, 3, 64, 48)
    elif name == "fmnist_cnn":
        model, shape = FmnistCnn(1, 28, 28, k), (8, 1, 28, 28)
    elif name == "mlp":
        model, shape = Mlp(1 * 8 * 8, 32, k), (8, 1, 8, 8)
    else:
        raise SystemExit(f"unknown model {name}")
    # Non-trivial BatchNorm affine parameters and running statistics, so they are really compared.
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, nn.BatchNorm2d):
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.uniform_(-0.2, 0.2)
                mod.running_mean.uniform_(-0.1, 0.1)
                mod.running_var.uniform_(0.8, 1.2)
    model.train()
    x = torch.randn(*shape)
    labels = torch.randint(0, k, (shape[0],), dtype=torch.int64)
    smoothing = 0.1
    state0 = {n: t.detach().clone() for n, t in model.state_dict().items()}
    logits = model(x)
    loss = F.cross_entropy(logits, labels, label_smoothing=smoothing)
    loss.backward()
    with h5py.File(out, "w") as f:
        f.attrs["model"] = name
        f.attrs["label_smoothing"] = smoothing
        f.attrs["num_classes"] = k
        f["input"] = x.numpy().astype(np.float32)
        f["labels"] = labels.numpy().astype(np.int32)
        f["logits"] = logits.detach().numpy().astype(np.float32)
        f["loss"] = np.float64(loss.item())
        for n, t in state0.items():
            if n.endswith("num_batches_tracked"):
                continue
            group = "param" if n in dict(model.named_parameters()) else "buffer"
            f[f"{group}/{n}"] = t.numpy().astype(np.float32)
        for n, p in model.named_parameters():
            f[f"grad/{n}"] = p.grad.numpy().astype(np.float32)
        for n, t in model.state_dict().items():
            if "running" in n:
                f[f"buffer_after/{n}"] = t.numpy().astype(np.float32)


if __name__ == "__main__":
    main()
