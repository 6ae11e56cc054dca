"""MLP of the dataset-condensation benchmark: flatten -> 128 -> ReLU -> 128 -> ReLU -> classes."""

from __future__ import annotations

import torch
from torch import nn

_HIDDEN = 128


class MLP(nn.Module):
    """Two hidden layers of 128 units; ``embed`` gives the second hidden layer's activations."""

    def __init__(self, channels: int, num_classes: int, image_size: tuple[int, int]) -> None:
        super().__init__()
        height, breadth = image_size
        self.hidden = nn.Sequential(
            nn.Flatten(1),
            nn.Linear(channels * height * breadth, _HIDDEN),
            nn.ReLU(),
            nn.Linear(_HIDDEN, _HIDDEN),
            nn.ReLU(),
        )
        self.feature_dim: int = _HIDDEN
        self.classifier = nn.Linear(_HIDDEN, num_classes)

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """Second hidden layer ``[N, 128]`` (the classifier's input)."""
        return self.hidden(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.embed(x))
