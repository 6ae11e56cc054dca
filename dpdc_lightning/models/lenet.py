"""LeNet as in the dataset-condensation benchmark.

conv 6@5x5 (padding 2 for 1-channel input) -> ReLU -> maxpool 2 -> conv 16@5x5 -> ReLU ->
maxpool 2 -> fc 120 -> ReLU -> fc 84 -> ReLU -> fc classes. 1-channel 28x28 and 3-channel 32x32
inputs both give 16*5*5 = 400 flattened features; other sizes are computed.
"""

from __future__ import annotations

import torch
from torch import nn

from dpdc_lightning.errors import UserError


class LeNet(nn.Module):
    """Benchmark LeNet; ``embed`` gives the 84 activations that feed the last Linear."""

    def __init__(self, channels: int, num_classes: int, image_size: tuple[int, int]) -> None:
        super().__init__()
        padding = 2 if channels == 1 else 0
        self.features = nn.Sequential(
            nn.Conv2d(channels, 6, kernel_size=5, padding=padding),
            nn.ReLU(),
            nn.MaxPool2d(kernel_size=2, stride=2),
            nn.Conv2d(6, 16, kernel_size=5),
            nn.ReLU(),
            nn.MaxPool2d(kernel_size=2, stride=2),
            nn.Flatten(1),
        )
        sizes = [((side + 2 * padding - 4) // 2 - 4) // 2 for side in image_size]
        if min(sizes) < 1:
            raise UserError(
                f"image_size {tuple(image_size)} is too small for lenet "
                "(features shrink to nothing); use at least 12x12 for 1 channel or 16x16 otherwise"
            )
        self.hidden = nn.Sequential(
            nn.Linear(16 * sizes[0] * sizes[1], 120),
            nn.ReLU(),
            nn.Linear(120, 84),
            nn.ReLU(),
        )
        self.feature_dim: int = 84
        self.classifier = nn.Linear(84, num_classes)

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """Last hidden layer ``[N, 84]`` (the classifier's input)."""
        return self.hidden(self.features(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.embed(x))
