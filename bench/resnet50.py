"""ResNet-50 with random weights: torchvision's when it imports, else the same network written here.

Why a copy: torchvision cannot be installed beside torch 2.13.0 on the project's machine, and the
benchmark must not download anything. The network below is torchvision's ``resnet50`` architecture
(bottleneck blocks 3-4-6-3, widths 64-128-256-512 x4, stride on the 3x3 convolution, 1000 classes):
25,557,032 parameters, as torchvision's; :func:`resnet50` says which one it built.
"""

from __future__ import annotations

import torch
from torch import nn


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (carrying the stride), 1x1 expand by 4, plus the shortcut."""

    def __init__(self, inputs: int, width: int, stride: int) -> None:
        super().__init__()
        out = width * 4
        self.conv1 = nn.Conv2d(inputs, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.relu = nn.ReLU(inplace=True)
        self.downsample: nn.Module = nn.Identity()
        if stride != 1 or inputs != out:
            self.downsample = nn.Sequential(
                nn.Conv2d(inputs, out, 1, stride=stride, bias=False), nn.BatchNorm2d(out)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return self.relu(y + self.downsample(x))


class ResNet50(nn.Module):
    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        layers, inputs = [], 64
        for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            stage = []
            for index in range(blocks):
                stage.append(Bottleneck(inputs, width, stride if index == 0 else 1))
                inputs = width * 4
            layers.append(nn.Sequential(*stage))
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(2048, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet50() -> tuple[nn.Module, str]:
    """The network in eval mode with seeded random weights, and where it came from."""
    torch.manual_seed(0)
    try:
        from torchvision.models import resnet50 as torchvision_resnet50
    except ImportError:
        return ResNet50().eval(), "ResNet-50 defined in bench/resnet50.py (torchvision not importable)"
    return torchvision_resnet50(weights=None).eval(), "torchvision.models.resnet50(weights=None)"
