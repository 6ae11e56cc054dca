"""VGG11 as in the dataset-condensation benchmark.

Configuration [64, M, 128, M, 256, 256, M, 512, 512, M, 512, 512, M]: each number is a 3x3 conv
(padding 1; padding 3 in the first conv for a 1-channel 28x28 input, so 28 -> 32) followed by norm
and ReLU; M is a 2x2 max-pool (skipped once the map is 1 pixel, so 16x16 inputs work). Instance norm
(``GroupNorm(C, C)``) by default. A Linear classifier reads the flattened features: 512 for 32x32
input, 512*2*2 for 64x64.
"""

from __future__ import annotations

import torch
from torch import nn

from dpdc_lightning.errors import UserError
from dpdc_lightning.models.convnet import make_norm, pads_mnist_to_32
from dpdc_lightning.models.normed import NormedClassifier

_VGG11: tuple[int | str, ...] = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")


class VGG11(NormedClassifier):
    """Benchmark VGG11; ``embed`` gives the flattened conv features."""

    def build_features(self, channels: int, image_size: tuple[int, int], norm: str) -> int:
        first_padding = 3 if pads_mnist_to_32(channels, image_size) else 1
        height, breadth = image_size
        layers: list[nn.Module] = []
        in_channels = channels
        for index, entry in enumerate(_VGG11):
            if entry == "M":
                # Small inputs (e.g. 16x16 digits) keep their last 1x1 map instead of pooling it
                # away.
                if height >= 2 and breadth >= 2:
                    layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
                    height, breadth = height // 2, breadth // 2
                continue
            padding = first_padding if index == 0 else 1
            layers += [
                nn.Conv2d(in_channels, entry, kernel_size=3, padding=padding),
                make_norm(norm, entry),
                nn.ReLU(),
            ]
            height, breadth = height + 2 * padding - 2, breadth + 2 * padding - 2
            in_channels = entry
        if height < 1 or breadth < 1:
            raise UserError(
                f"image_size {tuple(image_size)} is too small for vgg11 (five 2x2 pools); "
                "use at least 32x32"
            )
        layers.append(nn.Flatten(1))
        self.features = nn.Sequential(*layers)
        return in_channels * height * breadth

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """Flattened conv features ``[N, feature_dim]`` (the classifier's input)."""
        return self.features(x)
