"""The schema of LDPDC (Zheng & Li, Alg. 1): no network, one noisy mean per synthetic image."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from dpdc_lightning.config.methods.base import MethodConfig
from dpdc_lightning.config.schema import positive


@dataclass
class LDPDCConfig(MethodConfig):
    implementation: ClassVar[str] = "dpdc_lightning.methods.ldpdc:LDPDC"
    allowed_inits: ClassVar[tuple[str, ...]] = ("noise",)
    step_keys: ClassVar[tuple[str, ...]] = ("method.ipc",)
    ignored_keys: ClassVar[dict[str, str]] = {
        "iterations": "LDPDC runs exactly method.ipc steps, one per synthetic image",
        "lr_img": "LDPDC does not optimise: each image is one noisy mean of a Poisson sample",
        "momentum": "LDPDC does not optimise: each image is one noisy mean of a Poisson sample",
    }
    default_noise_multiplier: ClassVar[float | None] = 1.0  # the paper's σ = √d with b = 1
    makes_dp_auxiliary: ClassVar[bool] = True

    name: str = "ldpdc"
    iterations: int = 1  # not read: one step per synthetic image (ignored_keys)
    ipc: int = 50
    group_size: float = 50.0  # L
    bound: float = 1.0  # b: records are clamped to [-b, b]^d

    def __post_init__(self) -> None:
        super().__post_init__()
        positive("method.group_size", self.group_size)
        positive("method.bound", self.bound)
