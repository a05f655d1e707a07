#!/usr/bin/python3
"""Writes a PyTorch reference for our models to HDF5: weights, a fixed input batch, labels, and
PyTorch's logits, loss, every parameter's gradient and the BatchNorm running statistics after one
training-mode forward pass. tests/unit/test_torch_crosscheck.cpp runs our forward and backward on
the same weights and compares.

usage: torch_reference.py OUT.h5 MODEL   (MODEL: resnet18_cifar, resnet18, fmnist_cnn, mlp)
"""
import os
import sys

import h5py
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import torch_models  # noqa: E402


def main():
    out, name = sys.argv[1], sys.argv[2]
    torch.manual_seed(1234)
    k = 10
    shape = {"resnet18_cifar": (4, 3, 32, 32), "resnet18": (2, 3, 64, 48), "fmnist_cnn": (8, 1, 28, 28),
             "mlp": (8, 1, 8, 8)}[name]
    model = torch_models.build(name, k, shape[1], shape[2], shape[3], mlp_hidden=32)
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
