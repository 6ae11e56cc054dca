"""The random feature extractor Φ_θ of distribution-matching methods (DM, NDPDC, Dosser).

θ is drawn afresh every step from a generator derived from (seed, step) and never trained, so every
process of a sharded run, and a resumed run, uses the same θ at the same step.
"""

from __future__ import annotations

import torch
from torch import Tensor

from dpdc_lightning.models import ModelConfig
from dpdc_lightning.models import build_network, init_weights_
from dpdc_lightning.seeding import derive_generator

FORWARD_MODES = ("loop", "batched", "auto")
MEMORY_FORMATS = ("contiguous", "channels_last", "auto")
AUTOCAST_MODES = ("none", "bf16")


class RandomExtractor:
    """Holds one network whose weights are re-drawn in place by ``resample(step)``."""

    def __init__(self, model: ModelConfig, *, channels: int, num_classes: int, image_size: tuple[int, int],
                 seed: int, device: torch.device, forward: str = "auto", memory_format: str = "auto",
                 autocast: str = "none", compile: bool = False) -> None:
        """``memory_format`` is the layout of the inputs ("auto": the faster one measured on this
        device type); ``autocast="bf16"`` runs the forward in bfloat16 autocast (features are
        returned as float32; the mechanism clips and noises in float64); ``compile`` wraps the embedding in
        ``torch.compile``. All are speed options: features agree with the defaults up to rounding."""
        if memory_format not in MEMORY_FORMATS:
            raise ValueError(f"memory_format must be one of {MEMORY_FORMATS}, got {memory_format!r}")
        if autocast not in AUTOCAST_MODES:
            raise ValueError(f"autocast must be one of {AUTOCAST_MODES}, got {autocast!r}")
        self.seed = seed
        self.net = build_network(model.name, channels=channels, num_classes=num_classes, image_size=image_size,
                                 generator=derive_generator(seed, "theta", "build"), device=device,
                                 **model.options())
        self.net.train()  # DM/DPDC extract features with the network in training mode
        for parameter in self.net.parameters():
            parameter.requires_grad_(False)  # gradients are wanted for the images only
        # Batching all classes in one forward is only exact when normalisation is per sample.
        per_sample = "norm" not in model.options() or model.norm != "batchnorm"  # VGG/ResNet take a norm too
        if forward == "auto":
            # On CPU one forward per class is faster: batched ran at 0.7-0.8x of loop at the paper
            # setting (benchmarks/results/ndpdc_speed_cpu.md, 2-core Xeon, torch 2.14).
            forward = "batched" if device.type == "cuda" and per_sample else "loop"
        if forward == "batched" and not per_sample:
            raise ValueError(f"batched forward needs per-sample normalisation, model.norm is {model.norm}")
        self.forward_mode = forward
        if memory_format == "auto":
            memory_format = _auto_memory_format(device)
        # Only the inputs change layout: the convolutions follow them, while the weights stay
        # contiguous, so init_weights_ fills them in the same order as without this option.
        self.memory_format = memory_format
        self.autocast = autocast
        self.device_type = device.type
        # dynamic: Poisson samples change the batch size every step; static shapes would recompile.
        self._embed = torch.compile(self.net.embed, dynamic=True) if compile else self.net.embed

    def resample(self, step: int) -> None:
        init_weights_(self.net, generator=derive_generator(self.seed, "theta", step))

    def embed(self, x: Tensor) -> Tensor:
        if self.memory_format == "channels_last":
            x = x.contiguous(memory_format=torch.channels_last)
        if self.autocast == "bf16":
            with torch.autocast(self.device_type, dtype=torch.bfloat16):
                return self._embed(x).float()
        return self._embed(x)

    def embed_groups(self, groups: list[Tensor]) -> list[Tensor]:
        """Features of several batches: one forward each ("loop") or one for all ("batched")."""
        if self.forward_mode == "loop" or len(groups) == 1:
            return [self.embed(g) for g in groups]
        features = self.embed(torch.cat(groups))
        return list(torch.split(features, [len(g) for g in groups]))


def _auto_memory_format(device: torch.device) -> str:
    # CPU: channels-last inputs gave no clear gain at the paper setting (1.12x of contiguous by the
    # median of 7 steps but 0.87x by the fastest, i.e. within the noise of a shared 2-core machine;
    # benchmarks/results/ndpdc_speed_cpu.md), so the plain layout stays. CUDA: not measured yet
    # (benchmarks/ndpdc_speed.py --device cuda does), so the default there is unchanged too.
    return "contiguous"
