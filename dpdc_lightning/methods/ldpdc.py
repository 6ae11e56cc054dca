"""LDPDC: linear DP dataset condensation (Zheng & Li, "Differentially Private Dataset
Condensation", Alg. 1).

No network and no optimisation: step j sets, for every class c, s_j^c = (Σ_{x∈D} x + N(0, σ² I))/L
with D a Poisson sample of class c (q_c = L/N_c). Records are clamped to [−b, b]^d, so one record
has L2 norm at most b√d: that is the sensitivity of the sum; noise std σ = z·b√d with z the noise
multiplier (the paper's default σ = √d with b = 1 is z = 1). The run has exactly M steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Optional

import torch
from torch import Tensor

from dpdc_lightning.errors import UserError
from dpdc_lightning.memory import FLOAT, Need, poisson_high
from dpdc_lightning.methods.base import CondensationMethod, DataSpec, MethodConfig
from dpdc_lightning.models import ModelConfig
from dpdc_lightning.privacy.mechanisms import noisy_clipped_sum
from dpdc_lightning.privacy.plan import PrivacyPlan


@dataclass
class LDPDCConfig(MethodConfig):
    # privacy.noise_multiplier=null means this (noise std / L2 sensitivity; the papers' σ with unit sensitivity)
    default_noise_multiplier: ClassVar[Optional[float]] = 1.0
    allowed_inits: ClassVar[tuple[str, ...]] = ("noise",)
    step_keys: ClassVar[tuple[str, ...]] = ("method.ipc",)
    ignored_keys: ClassVar[dict[str, str]] = {
        "iterations": "LDPDC runs exactly method.ipc steps, one per synthetic image",
        "lr_img": "LDPDC does not optimise: each image is one noisy mean of a Poisson sample",
        "momentum": "LDPDC does not optimise: each image is one noisy mean of a Poisson sample"}

    name: str = "ldpdc"
    iterations: int = 1  # not read: one step per synthetic image (ignored_keys)
    ipc: int = 50
    group_size: float = 50.0  # L
    bound: float = 1.0  # b: records are clamped to [-b, b]^d

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.group_size > 0:
            raise UserError(f"method.group_size must be > 0, got {self.group_size}")
        if not self.bound > 0:
            raise UserError(f"method.bound must be > 0, got {self.bound}")


class LDPDC(CondensationMethod):
    config_class = LDPDCConfig
    private = True
    sampling = "per_class_poisson"
    steps_adjustable = False
    uses_network = False

    @classmethod
    def data_steps(cls, config: LDPDCConfig) -> int:
        return config.ipc

    @classmethod
    def sample_size(cls, config: LDPDCConfig) -> float:
        return config.group_size

    @classmethod
    def memory_needs(cls, config: LDPDCConfig, *, data: DataSpec, plan: PrivacyPlan, model: ModelConfig,
                     device: torch.device) -> list[Need]:
        """The images and their exported copy (no gradient, no optimiser), and one class's sample
        clamped in float32 and summed in float64."""
        image = math.prod(data.image_shape) * FLOAT
        return [Need("synthetic set (values, export)", 2 * data.num_classes * config.ipc * image, "method.ipc"),
                Need("a real batch", poisson_high(config.group_size) * 4 * image, "method.group_size", step=True)]

    def sensitivity(self) -> float:
        return self.config.bound * math.sqrt(math.prod(self.data.image_shape))

    def configure_optimizers(self) -> None:
        return None

    @torch.no_grad()
    def condensation_step(self, batch: dict[str, Any], step: int) -> Optional[Tensor]:
        b, view = self.config.bound, self.class_view()
        for c, real in zip(batch["classes"], batch["images"]):
            rows = real.clamp(-b, b).flatten(1).float()
            noisy_sum, event = noisy_clipped_sum(rows, max_norm=self.sensitivity(), noise_multiplier=self.noise_multiplier,
                                                 sample_rate=self.plan.rate_of(c), noise=self.noise_stream(step, c),
                                                 rows_are=f"records clamped to [-{b:g}, {b:g}]^d",
                                                 expected_size=self.plan.sample_size)
            self.spend(event, partition=c)
            # Divided by the plan's expected sample L (= method.group_size), never the realised size.
            view[c, step].copy_((noisy_sum / self.plan.sample_size).view(self.data.image_shape))
        return None

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        super().training_step(batch, batch_idx)
        self._share_row(int(batch["step"]), batch["classes"])

    @torch.no_grad()
    def _share_row(self, step: int, classes: list[int]) -> None:
        """Under DDP each process wrote row ``step`` of its own classes only. Summing the row over
        processes, others' classes zeroed, gives every process the whole row at once (exactly: x + 0
        = x), so checkpoints and image logs, saved by rank 0 after each step, hold every class."""
        if self.trainer.world_size == 1:
            return
        rows = self.class_view()[:, step]
        mine = torch.zeros_like(rows)
        mine[classes] = rows[classes]
        rows.copy_(self.trainer.strategy.reduce(mine, reduce_op="sum"))
