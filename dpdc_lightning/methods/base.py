"""The shared base of every condensation method: a LightningModule whose parameter is the data.

A method subclass says what its private data stream looks like (``sampling``), how many steps it
runs, which privacy event one step spends (``planned_event``), and what one step does
(``condensation_step``). Everything else (optimiser, step counting, event hand-over to the
PrivacyCallback, export) lives here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Optional

import lightning as L
import torch
from torch import Tensor, nn

from dpdc_lightning.config import ModelConfig
from dpdc_lightning.data.subsets import random_class_picks
from dpdc_lightning.errors import UserError
from dpdc_lightning.privacy.mechanisms import PrivacyEvent
from dpdc_lightning.seeding import derive_generator, os_entropy_seed

class NumericalFault(UserError):
    """The optimisation diverged (NaN/Inf); the run stops before anything bad is saved."""


SAMPLING_KINDS = ("per_class_poisson", "per_class_fixed", "global_poisson")


@dataclass
class MethodConfig:
    """Fields every method has; a method's own schema subclasses this."""

    name: str = ""
    ipc: int = 10
    iterations: int = 1000
    lr_img: float = 1.0
    momentum: float = 0.5
    init: str = "noise"
    log_images_every: int = 100
    checkpoint_every: int = 100

    def __post_init__(self) -> None:
        for key in ("ipc", "iterations", "log_images_every", "checkpoint_every"):
            if getattr(self, key) < 1:
                raise UserError(f"method.{key} must be >= 1, got {getattr(self, key)}")
        if not self.lr_img > 0:
            raise UserError(f"method.lr_img must be > 0, got {self.lr_img}")
        if not 0 <= self.momentum < 1:
            raise UserError(f"method.momentum must be in [0, 1), got {self.momentum}")
        if self.init not in ("noise", "real"):
            raise UserError(f"method.init={self.init!r} is not allowed; choose one of: noise, real")


@dataclass(frozen=True)
class DataSpec:
    """What a method needs to know about the private data (all of it public by assumption)."""

    num_classes: int
    image_shape: tuple[int, int, int]
    class_sizes: tuple[int, ...]


class CondensationMethod(L.LightningModule):
    """Base class. Subclasses set the class attributes and implement ``condensation_step``."""

    config_class: ClassVar[type[MethodConfig]] = MethodConfig
    private: ClassVar[bool] = False
    sampling: ClassVar[str] = "per_class_poisson"
    default_noise_multiplier: ClassVar[Optional[float]] = None
    steps_adjustable: ClassVar[bool] = True  # False where the step count is fixed by the algorithm

    def __init__(self, config: MethodConfig, *, data: DataSpec, seed: int, model: Optional[ModelConfig] = None,
                 noise_multiplier: Optional[float] = None, reproducible_noise: bool = False,
                 noise_seed: Optional[int] = None) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.config = config
        self.model_config = model or ModelConfig()
        self.data = data
        self.seed = seed
        self.noise_multiplier = noise_multiplier if noise_multiplier is not None else self.default_noise_multiplier
        self.reproducible_noise = reproducible_noise
        # Secure mode: the noise seed is the run's secret (privacy/secret.py), else OS entropy; never logged.
        if noise_seed is None:
            noise_seed = seed if reproducible_noise else os_entropy_seed()
        self._noise_seed = noise_seed
        self._pending_events: list[tuple[int, PrivacyEvent]] = []
        num_classes, ipc = data.num_classes, config.ipc
        self.images = nn.Parameter(torch.randn(num_classes * ipc, *data.image_shape,
                                               generator=derive_generator(seed, "init")))
        self.register_buffer("labels", torch.arange(num_classes).repeat_interleave(ipc))
        # Steps whose privacy cost is spent; restored from checkpoints, drives the data stream.
        self.register_buffer("completed_steps", torch.zeros((), dtype=torch.long))
        if self.sampling == "per_class_poisson" and self.sample_size() > min(data.class_sizes):
            raise UserError(f"the expected sample per class ({self.sample_size():g}) is larger than the smallest "
                            f"class ({min(data.class_sizes)} records); lower method.group_size")

    # ---- what a subclass describes -------------------------------------------------------------
    def total_steps(self) -> int:
        return self.config.iterations

    def sample_size(self) -> float:
        """Expected records per class (per-class sampling) or per step (global sampling)."""
        raise NotImplementedError

    def sample_rate(self) -> float:
        """q of one step: max over classes of size/N_c (parallel composition, DPDC Cor. A.1)."""
        if self.sampling == "global_poisson":
            return min(1.0, self.sample_size() / sum(self.data.class_sizes))
        return min(1.0, self.sample_size() / min(self.data.class_sizes))

    def planned_event(self) -> Optional[PrivacyEvent]:
        """The privacy event every step spends; None for non-private methods."""
        if not self.private:
            return None
        return PrivacyEvent(noise_multiplier=float(self.noise_multiplier), sample_rate=self.sample_rate())

    def mechanism_summary(self) -> Optional[dict[str, Any]]:
        """One step's mechanism for the report: sensitivity, noise multiplier and std, sample rate."""
        return None

    def condensation_step(self, batch: dict[str, Any], step: int) -> Optional[Tensor]:
        """One step on one sampled batch; returns the loss to log (or None)."""
        raise NotImplementedError

    # ---- shared machinery ----------------------------------------------------------------------
    def class_view(self) -> Tensor:
        """The synthetic images as [classes, ipc, C, H, W] (a view: gradients flow)."""
        return self.images.view(self.data.num_classes, self.config.ipc, *self.data.image_shape)

    def use_noise_seed(self, seed: int) -> None:
        """Draw noise from the run's secret seed (privacy/secret.py) instead of a fresh one."""
        self._noise_seed = seed

    def noise_generator(self, step: int, class_index: int) -> torch.Generator:
        """Generator for the privacy noise of (step, class); shard-independent by construction."""
        return derive_generator(self._noise_seed, "noise", step, class_index)

    def spend(self, event: PrivacyEvent, *, partition: int) -> None:
        """Record an event a mechanism returned on one disjoint part of the data (a class, or -1
        for the whole set); the PrivacyCallback checks it against the plan."""
        self._pending_events.append((partition, event))

    def pop_events(self) -> list[tuple[int, PrivacyEvent]]:
        events, self._pending_events = self._pending_events, []
        return events

    def setup(self, stage: str) -> None:
        if self.config.init == "real" and stage == "fit":
            self._init_from_real()

    def _init_from_real(self) -> None:
        if self.private:
            raise UserError("method.init=real copies private images into the output; private methods need init=noise")
        datamodule = self.trainer.datamodule
        pools = [datamodule.class_images(c) for c in range(self.data.num_classes)]
        # The same draw as the random-real baseline of evaluate.py: DM starts from exactly that set.
        picks = random_class_picks([len(pool) for pool in pools], ipc=self.config.ipc, seed=self.seed)
        with torch.no_grad():
            view = self.class_view()
            for c, (pool, pick) in enumerate(zip(pools, picks)):
                view[c].copy_(pool[pick].to(view.device))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD([self.images], lr=self.config.lr_img, momentum=self.config.momentum)

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        step = int(batch["step"])
        loss = self.condensation_step(batch, step)
        # Raised before the checkpoint callbacks run, so the last checkpoint on disk stays good.
        if loss is not None and not torch.isfinite(loss):
            raise NumericalFault(f"step {step}: the loss is {loss.item()}; the run stopped and its last good "
                                 "checkpoint is kept (try a lower method.lr_img)")
        if not torch.isfinite(self.images).all():
            raise NumericalFault(f"step {step}: the synthetic set holds NaN/Inf; the run stopped and its last good "
                                 "checkpoint is kept (try a lower method.lr_img)")
        self.completed_steps += 1
        if loss is not None:
            # Under DDP a process's loss covers its own classes only; their sum is the whole loss.
            self.log("loss", loss.detach(), prog_bar=True, batch_size=1, sync_dist=True, reduce_fx="sum")

    def optimise(self, loss: Tensor) -> None:
        """One image-optimiser step. DDP averages gradients over ranks while each class's
        gradient comes from one rank only, so the loss is scaled by the world size first."""
        optimizer = self.optimizers()
        optimizer.zero_grad(set_to_none=True)
        self.manual_backward(loss * self.trainer.world_size)
        optimizer.step()

    def synthetic_set(self) -> tuple[Tensor, Tensor]:
        return self.images.detach().float().cpu().clone(), self.labels.detach().cpu().clone()
