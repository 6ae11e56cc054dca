"""LDPDC: linear DP dataset condensation (Zheng & Li, "Differentially Private Dataset
Condensation", Alg. 1).

No network and no optimisation: step j sets, for every class c,
s_j^c = (Σ_{x∈D} x + N(0, σ² I))/L with D a Poisson sample of class c (q_c = L/N_c).
Records are clamped to [−b, b]^d, so one record has L2 norm at most b√d: that is the sensitivity
of the sum; noise std σ = z·b√d with z the noise multiplier (the paper's default σ = √d with
b = 1 is z = 1). The run has exactly M steps.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from dpdc_lightning.config.methods import LDPDCConfig
from dpdc_lightning.config.schema import ModelConfig
from dpdc_lightning.methods.base import CondensationMethod
from dpdc_lightning.methods.memory import FLOAT, Need, poisson_high
from dpdc_lightning.methods.release import CheckSizes, Records
from dpdc_lightning.methods.spec import DataSpec
from dpdc_lightning.privacy.planning.plan import PrivacyPlan


class LDPDC(CondensationMethod):
    config_class = LDPDCConfig
    private = True
    sampling = "per_class_poisson"
    steps_adjustable = False
    uses_network = False
    checks = CheckSizes(tiny=("method.ipc=3", "method.group_size={group}"))

    @classmethod
    def data_steps(cls, config: LDPDCConfig) -> int:
        return config.ipc

    @classmethod
    def sample_size(cls, config: LDPDCConfig) -> float:
        return config.group_size

    @classmethod
    def memory_needs(
        cls,
        config: LDPDCConfig,
        *,
        data: DataSpec,
        plan: PrivacyPlan,
        model: ModelConfig,
        device: torch.device,
    ) -> list[Need]:
        """The images and their exported copy (no gradient, no optimiser), and one class's sample
        clamped in float32 and summed in float64."""
        image = math.prod(data.image_shape) * FLOAT
        return [
            Need(
                "synthetic set (values, export)",
                2 * data.num_classes * config.ipc * image,
                "method.ipc",
            ),
            Need(
                "a real batch",
                poisson_high(config.group_size) * 4 * image,
                "method.group_size",
                step=True,
            ),
        ]

    # ---- the private release: Σ_{x∈D_c} clamp_b(x) + N(0, (z b√d)² I), divided by L -----
    def sensitivity(self) -> float:
        return self.config.bound * math.sqrt(math.prod(self.data.image_shape))

    def normaliser(self) -> float:
        # The plan's expected sample L (= method.group_size), never the realised size.
        return self.plan.sample_size

    def rows_are(self) -> str:
        b = self.config.bound
        return f"records clamped to [-{b:g}, {b:g}]^d"

    def release_rows(self, records: Records, *, step: int, context: Any) -> list[Tensor]:
        b = self.config.bound
        return [images.clamp(-b, b).flatten(1).float() for images in records.images]

    def configure_optimizers(self) -> None:
        return None

    @torch.no_grad()
    def condensation_step(self, batch: dict[str, Any], step: int) -> Tensor | None:
        view = self.class_view()
        for c, image in self.release_batch(batch, step).items():
            view[c, step].copy_(image.view(self.data.image_shape))
        return None

    def run_step(self, batch: dict[str, Any]) -> Tensor | None:
        loss = super().run_step(batch)
        self._share_row(int(batch["step"]), batch["classes"])
        return loss

    @torch.no_grad()
    def _share_row(self, step: int, classes: list[int]) -> None:
        """Under DDP each process wrote row ``step`` of its own classes only. Summing the row over
        processes, others' classes zeroed, gives every process the whole row at once (exactly: x + 0
        = x), so checkpoints and image logs, saved by rank 0 after each step, hold every class."""
        if self.world_size == 1:
            return
        rows = self.class_view()[:, step]
        mine = torch.zeros_like(rows)
        mine[classes] = rows[classes]
        rows.copy_(self.runtime.reduce_sum(mine))
