"""ResNet18 as in the dataset-condensation benchmark.

BasicBlocks [2, 2, 2, 2] with widths 64/128/256/512; the stem is a single 3x3 stride-1 conv
without max-pool (small images), convolutions have no bias, and the norm is instance norm
(``GroupNorm(C, C)``) by default. Global average pooling makes the 512 features independent of
the input size; a Linear classifier reads them.
"""

from __future__ import annotations

import torch
from torch import nn

from dpdc_lightning.models.convnet import make_norm
from dpdc_lightning.models.normed import NormedClassifier


class BasicBlock(nn.Module):
    """Two 3x3 convs with a residual connection (1x1 projection when the shape changes)."""

    def __init__(self, in_planes: int, planes: int, *, stride: int, norm: str) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(
            in_planes, planes, kernel_size=3, stride=stride, padding=1, bias=False
        )
        self.norm1 = make_norm(norm, planes)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=1, padding=1, bias=False)
        self.norm2 = make_norm(norm, planes)
        self.relu = nn.ReLU()
        if stride != 1 or in_planes != planes:
            self.shortcut: nn.Module = nn.Sequential(
                nn.Conv2d(in_planes, planes, kernel_size=1, stride=stride, bias=False),
                make_norm(norm, planes),
            )
        else:
            self.shortcut = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


class ResNet18(NormedClassifier):
    """Benchmark ResNet18; ``embed`` gives the 512 globally pooled features."""

    def build_features(self, channels: int, image_size: tuple[int, int], norm: str) -> int:
        # Any image_size works: stride-2 3x3 convs with padding 1 never shrink a side below 1,
        # and the global pooling removes the spatial dimensions.
        del image_size
        self.stem = nn.Sequential(
            nn.Conv2d(channels, 64, kernel_size=3, stride=1, padding=1, bias=False),
            make_norm(norm, 64),
            nn.ReLU(),
        )
        stages: list[nn.Module] = []
        in_planes = 64
        for planes, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            stages.append(BasicBlock(in_planes, planes, stride=stride, norm=norm))
            stages.append(BasicBlock(planes, planes, stride=1, norm=norm))
            in_planes = planes
        self.stages = nn.Sequential(*stages)
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(1))
        return in_planes

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """Globally pooled features ``[N, 512]`` (the classifier's input)."""
        return self.pool(self.stages(self.stem(x)))
