"""hpctrain's models written in PyTorch (Debian's python3-torch/torchvision), with the same
parameter names as hpctrain (torchvision state_dict names). Used by the cross-check tests, the
PyTorch baseline benchmark and the import/export scripts."""
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision


def resnet18_cifar(num_classes=10, in_channels=3):
    """ResNet-18 with a 3x3 stride-1 stem and no max pool (the CIFAR variant)."""
    m = torchvision.models.resnet18(num_classes=num_classes)
    m.conv1 = nn.Conv2d(in_channels, 64, kernel_size=3, stride=1, padding=1, bias=False)
    m.maxpool = nn.Identity()
    return m


class FmnistCnn(nn.Module):
    """conv3x3(32)-BN-ReLU-maxpool2, conv3x3(64)-BN-ReLU-maxpool2, linear(128)-ReLU, linear(k)."""

    def __init__(self, c=1, h=28, w=28, k=10):
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
    """flatten, linear(hidden)-ReLU, linear(hidden)-ReLU, linear(k)."""

    def __init__(self, d, hidden=64, k=10):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(d, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, k)

    def forward(self, x):
        x = torch.flatten(x, 1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def build(name, num_classes=10, c=3, h=32, w=32, mlp_hidden=64):
    """The PyTorch module for an hpctrain model name."""
    if name == "resnet18_cifar":
        return resnet18_cifar(num_classes, c)
    if name in ("resnet18", "resnet50"):
        m = getattr(torchvision.models, name)(num_classes=num_classes)
        if c != 3:  # hpctrain builds the stem for the dataset's channel count
            m.conv1 = nn.Conv2d(c, 64, 7, 2, 3, bias=False)
        return m
    if name == "fmnist_cnn":
        return FmnistCnn(c, h, w, num_classes)
    if name == "mlp":
        return Mlp(c * h * w, mlp_hidden, num_classes)
    raise ValueError(f"unknown model {name}")
