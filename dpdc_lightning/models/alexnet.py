"""AlexNet as in the dataset-condensation benchmark (no norm layers, one Linear classifier).

conv 128@5x5 (padding 4 for 1-channel input, else 2) -> ReLU -> maxpool 2 -> conv 192@5x5 p2 ->
ReLU -> maxpool 2 -> conv 256@3x3 -> ReLU -> conv 192@3x3 -> ReLU -> conv 192@3x3 -> ReLU ->
maxpool 2 -> fc. 1-channel 28x28 and 3-channel 32x32 inputs both give 192*4*4 = 3072 features.
"""

from __future__ import annotations

import torch
from torch import nn

from dpdc_lightning.errors import UserError


class AlexNet(nn.Module):
    """Benchmark AlexNet; ``embed`` gives the flattened conv features."""

    def __init__(self, channels: int, num_classes: int, image_size: tuple[int, int]) -> None:
        super().__init__()
        padding = 4 if channels == 1 else 2
        self.features = nn.Sequential(
            nn.Conv2d(channels, 128, kernel_size=5, stride=1, padding=padding),
            nn.ReLU(),
            nn.MaxPool2d(kernel_size=2, stride=2),
            nn.Conv2d(128, 192, kernel_size=5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(kernel_size=2, stride=2),
            nn.Conv2d(192, 256, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.Conv2d(256, 192, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.Conv2d(192, 192, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(kernel_size=2, stride=2),
            nn.Flatten(1),
        )
        # Only the first conv changes the size; the three pools halve it.
        sizes = [(side + 2 * padding - 4) // 8 for side in image_size]
        if min(sizes) < 1:
            raise UserError(
                f"image_size {tuple(image_size)} is too small for alexnet; "
                "use at least 4x4 for 1 channel or 8x8 otherwise"
            )
        self.feature_dim: int = 192 * sizes[0] * sizes[1]
        self.classifier = nn.Linear(self.feature_dim, num_classes)

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """Flattened conv features ``[N, feature_dim]`` (the classifier's input)."""
        return self.features(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.embed(x))
