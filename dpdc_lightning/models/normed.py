"""What the benchmark's ResNet18 and VGG11 share: the constructor (channels, classes, image size
and a norm from :data:`~dpdc_lightning.models.convnet.NORMS`), a feature extractor built by the
subclass, and one Linear classifier on its features."""

from __future__ import annotations

import torch
from torch import nn

from dpdc_lightning.models.convnet import NORMS, check_choice


class NormedClassifier(nn.Module):
    """``features`` (built by :meth:`build_features`), then ``classifier``; ``embed`` gives the
    classifier's input. The classifier is created last, so parameters keep the order in which
    the networks were first written (the generator-driven initialisation follows that order)."""

    def __init__(
        self,
        channels: int,
        num_classes: int,
        image_size: tuple[int, int],
        *,
        norm: str = "instancenorm",
    ) -> None:
        super().__init__()
        check_choice("norm", norm, NORMS)
        self.feature_dim: int = self.build_features(channels, image_size, norm)
        self.classifier = nn.Linear(self.feature_dim, num_classes)

    def build_features(self, channels: int, image_size: tuple[int, int], norm: str) -> int:
        """Register the feature layers; return the number of features ``embed`` gives."""
        raise NotImplementedError

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.embed(x))
