"""Models for the bundled workloads.

ResNet-50 is written out here (the torchvision layout: bottleneck blocks
[3, 4, 6, 3], expansion 4) because torchvision wheels are tied to one torch
build and this project pins torch alone.
"""

from __future__ import annotations

import torch
from torch import nn


def _conv_bn(cin: int, cout: int, kernel: int = 3, stride: int = 1) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, kernel, stride, kernel // 2, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]


def small_cnn(num_classes: int) -> nn.Module:
    # about 90 ms per 64-image 64x64 training step on one CPU core: a stand-in for a GPU step.
    # Global max pooling: "is there a corner / an arm anywhere" is what tells the shapes apart.
    return nn.Sequential(
        *_conv_bn(3, 16, 3, 2),
        *_conv_bn(16, 32),
        nn.MaxPool2d(2),
        *_conv_bn(32, 64),
        nn.MaxPool2d(2),
        *_conv_bn(64, 64),
        nn.AdaptiveMaxPool2d(1),
        nn.Flatten(),
        nn.Linear(64, num_classes),
    )


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * self.expansion
        self.body = nn.Sequential(
            *_conv_bn(cin, width, 1),
            *_conv_bn(width, width, 3, stride),
            nn.Conv2d(width, cout, 1, bias=False),
            nn.BatchNorm2d(cout),
        )
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.body(x) + self.shortcut(x))


def resnet50(num_classes: int) -> nn.Module:
    layers: list[nn.Module] = [*_conv_bn(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            layers.append(Bottleneck(cin, width, stride if i == 0 else 1))
            cin = width * Bottleneck.expansion
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, num_classes)]
    return nn.Sequential(*layers)
