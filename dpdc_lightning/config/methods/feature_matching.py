"""Schemas of the methods that match features of a random extractor under Siamese DSA: DM and
NDPDC (Dosser's is in ``dosser.py``), with the extractor's speed options."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from dpdc_lightning.config.methods.base import MethodConfig
from dpdc_lightning.config.schema import at_least_one, positive
from dpdc_lightning.errors import UserError

# Extractor speed options (methods/extractor.py; benchmarks/results/speed/ndpdc_speed_*.md).
FORWARD_MODES = ("loop", "batched", "auto")
MEMORY_FORMATS = ("contiguous", "channels_last", "auto")
# tf32: TensorFloat-32 on CUDA (Ampere+); a no-op elsewhere
AUTOCAST_MODES = ("none", "bf16", "tf32", "auto")
CLIP_GRADIENTS = ("exact", "detached")


@dataclass
class FeatureMatchingConfig(MethodConfig):
    """DM, NDPDC, Dosser: a random extractor under Siamese DSA, and its speed options (forward and
    memory_format are exact up to rounding; compile moves image gradients by 1e-4..1e-3 relative;
    autocast bf16 by a few percent). ``clip_gradient``: the gradient through the clipping of
    SYNTHETIC features, exact (default, by measurement:
    benchmarks/results/utility/clip_gradient_fashion_mnist_cpu.md) or the factor held constant as
    in the DPDC authors' code (same values)."""

    dsa_strategy: str = "color_crop_cutout_flip_scale_rotate"
    forward: str = "auto"
    memory_format: str = "auto"
    autocast: str = "auto"
    compile: bool = False
    clip_gradient: str = "exact"

    def __post_init__(self) -> None:
        super().__post_init__()
        for key, allowed in (
            ("clip_gradient", CLIP_GRADIENTS),
            ("forward", FORWARD_MODES),
            ("memory_format", MEMORY_FORMATS),
            ("autocast", AUTOCAST_MODES),
        ):
            if getattr(self, key) not in allowed:
                raise UserError(
                    f"method.{key}={getattr(self, key)!r} is not allowed; "
                    f"choose one of: {', '.join(allowed)}"
                )


@dataclass
class DMConfig(FeatureMatchingConfig):
    implementation: ClassVar[str] = "dpdc_lightning.methods.dm:DM"

    name: str = "dm"
    batch_real: int = 256
    init: str = "real"

    def __post_init__(self) -> None:
        super().__post_init__()
        at_least_one("method", self, "batch_real")
        if self.clip_gradient != "exact":
            raise UserError(
                "method.clip_gradient applies to methods that clip features (ndpdc, dosser); "
                "dm does not clip"
            )


@dataclass
class NDPDCConfig(FeatureMatchingConfig):
    implementation: ClassVar[str] = "dpdc_lightning.methods.ndpdc:NDPDC"
    allowed_inits: ClassVar[tuple[str, ...]] = ("noise",)
    default_noise_multiplier: ClassVar[float | None] = 1.0  # the paper's σ with G = 1
    makes_dp_auxiliary: ClassVar[bool] = True

    name: str = "ndpdc"
    group_size: float = 50.0  # L: expected Poisson sample per class
    clip_norm: float = 1.0  # G

    def __post_init__(self) -> None:
        super().__post_init__()
        positive("method.group_size", self.group_size)
        positive("method.clip_norm", self.clip_norm)
