"""The random feature extractor Φ_θ of distribution-matching methods (DM, NDPDC, Dosser).

θ is drawn afresh every step from a generator derived from (seed, step) and never trained, so every
process of a sharded run, and a resumed run, uses the same θ at the same step.
"""

from __future__ import annotations

import torch
from torch import Tensor

from dpdc_lightning.config import ModelConfig
from dpdc_lightning.models import build_network, init_weights_
from dpdc_lightning.seeding import derive_generator

FORWARD_MODES = ("loop", "batched", "auto")


class RandomExtractor:
    """Holds one network whose weights are re-drawn in place by ``resample(step)``."""

    def __init__(self, model: ModelConfig, *, channels: int, num_classes: int, image_size: tuple[int, int],
                 seed: int, device: torch.device, forward: str = "auto") -> None:
        self.seed = seed
        self.net = build_network(model.name, channels=channels, num_classes=num_classes, image_size=image_size,
                                 generator=derive_generator(seed, "theta", "build"), device=device,
                                 **model.options())
        self.net.train()  # DM/DPDC extract features with the network in training mode
        for parameter in self.net.parameters():
            parameter.requires_grad_(False)  # gradients are wanted for the images only
        # Batching all classes in one forward is only exact when normalisation is per sample.
        per_sample = model.name != "convnet" or model.norm in ("instancenorm", "layernorm", "groupnorm", "none")
        if forward == "auto":
            forward = "batched" if device.type == "cuda" and per_sample else "loop"
        if forward == "batched" and not per_sample:
            raise ValueError(f"batched forward needs per-sample normalisation, model.norm is {model.norm}")
        self.forward_mode = forward

    def resample(self, step: int) -> None:
        init_weights_(self.net, generator=derive_generator(self.seed, "theta", step))

    def embed(self, x: Tensor) -> Tensor:
        return self.net.embed(x)

    def embed_groups(self, groups: list[Tensor]) -> list[Tensor]:
        """Features of several batches: one forward each ("loop") or one for all ("batched")."""
        if self.forward_mode == "loop" or len(groups) == 1:
            return [self.net.embed(g) for g in groups]
        features = self.net.embed(torch.cat(groups))
        return list(torch.split(features, [len(g) for g in groups]))
