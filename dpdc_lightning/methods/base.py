"""The shared base of every condensation method: the maths of one step, on a plain ``nn.Module``.

A subclass describes itself with class attributes and a few small hooks:

- ``private``, ``sampling`` (per-class Poisson, per-class fixed for non-private baselines, global
  Poisson), ``sample_size(config)``, ``data_steps(config)`` and ``free_steps(config)``: together
  the :class:`StepSchedule` the privacy plan is made from, before the method exists;
- ``build_synthetic()``: the synthetic set as a module (``PixelImages`` by default, or e.g.
  ``GeneratedImages``); the base optimises its parameters and exports its images;
- ``condensation_step(batch, step)`` for a data step and ``free_step(step)`` for a step that reads
  no data and spends nothing (e.g. Dosser's optimisation stage);
- a private method's release (``release.py``): ``release_context``, ``release_rows``,
  ``sensitivity``, ``normaliser`` and ``release``, which its step calls through ``release_batch``
  and the white-box audit calls with canaries; ``checks``: its sizes for ``audit.py check``;
- ``carry(name, obj)`` registers state kept between steps (an inner network's optimiser, a signal
  bank): anything with ``state_dict``/``load_state_dict`` is saved in every checkpoint and restored
  on resume (submodules are saved with the module anyway).

A method never touches a trainer: what it needs from whatever runs it (the backward pass and the
optimiser step, the number of processes, a sum over processes, logging) it asks of ``runtime``, a
:class:`Runtime`. The default one drives steps by hand in one process; ``engine/method_module.py``
gives Lightning's. The method is built with its final privacy plan (noise multiplier, sample rates,
step counts) and noise seed; nothing is patched onto it afterwards. A class is a method once it is
registered with its schema (``registry.py``; docs/adding_a_method.md).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import Tensor

from dpdc_lightning.config.methods import MethodConfig
from dpdc_lightning.config.schema import ModelConfig
from dpdc_lightning.data.subsets import random_class_picks
from dpdc_lightning.errors import NumericalFault, UserError
from dpdc_lightning.methods.memory import FLOAT, Need
from dpdc_lightning.methods.release import CheckSizes, PrivateRelease
from dpdc_lightning.methods.runtime import Runtime
from dpdc_lightning.methods.spec import DataSpec
from dpdc_lightning.methods.synthetic import PixelImages, SyntheticSet
from dpdc_lightning.models import NETWORKS
from dpdc_lightning.privacy.mechanisms.gaussian import PrivacyEvent
from dpdc_lightning.privacy.mechanisms.noise import NoiseStream
from dpdc_lightning.privacy.mechanisms.per_example import refuse_batch_norm
from dpdc_lightning.privacy.planning.plan import PrivacyPlan, StepSchedule
from dpdc_lightning.seeding import derive_generator


def _network_on_meta(model: ModelConfig, data: DataSpec) -> torch.nn.Module:
    with torch.device("meta"):
        return NETWORKS[model.name].factory(
            data.image_shape[0], data.num_classes, tuple(data.image_shape[1:]), **model.options()
        )


class CondensationMethod(PrivateRelease, torch.nn.Module):
    """Base class. Subclasses set the class attributes and implement ``condensation_step``."""

    config_class: ClassVar[type[MethodConfig]] = MethodConfig
    private: ClassVar[bool] = False
    sampling: ClassVar[str] = "per_class_poisson"
    steps_adjustable: ClassVar[bool] = True  # False where the algorithm fixes the data step count
    uses_auxiliary: ClassVar[bool] = False  # True: condense() hands it an auxiliary image set
    uses_network: ClassVar[bool] = True  # False for a method that never builds model.* (LDPDC)
    checks: ClassVar[CheckSizes] = CheckSizes()  # the sizes audit.py check runs it at

    def __init__(
        self,
        config: MethodConfig,
        *,
        data: DataSpec,
        plan: PrivacyPlan,
        seed: int,
        noise_seed: int | None = None,
        model: ModelConfig | None = None,
        augment_mode: str = "single",
        reproducible_noise: bool = False,
        auxiliary: Any | None = None,
    ) -> None:
        """``noise_seed`` keys the privacy noise (the run's secret; required for a private method);
        ``reproducible_noise`` swaps the keyed SHAKE-256 stream for a seeded torch generator (then
        ``noise_seed`` is the public run seed and the output is NOT private). ``auxiliary`` is an
        image set that is public or was paid for in the plan (methods/auxiliary.py), for methods
        that declare ``uses_auxiliary``."""
        super().__init__()
        if plan.private != self.private or plan.sampling != self.sampling:
            raise ValueError(
                f"the plan is for a {'private' if plan.private else 'non-private'} {plan.sampling} "
                f"method, {type(self).__name__} is not"
            )
        if self.private and noise_seed is None:
            raise ValueError("a private method needs the run's noise seed")
        self.config = config
        self.model_config = model or ModelConfig()
        if self.private and self.uses_network:
            # Structural, before anything runs: the built network on the meta device (no storage).
            refuse_batch_norm(
                _network_on_meta(self.model_config, data), method=config.name or type(self).__name__
            )
        self.data, self.plan, self.seed, self.augment_mode = data, plan, seed, augment_mode
        self.runtime = Runtime()
        self._noise_seed = noise_seed
        self._reproducible_noise = reproducible_noise
        self._noise_streams: list[NoiseStream] = []  # handed out during the current step
        self._noise_values_per_partition = 0  # largest draw of one partition in a step (report)
        self._pending_events: list[tuple[int, PrivacyEvent]] = []
        self._carried: dict[str, Any] = {}
        self._restored_carried: dict[str, Any] = {}
        self._optimizer: torch.optim.Optimizer | None = None
        self.optimised = False  # set by optimise() within a step
        self.auxiliary = auxiliary
        self.synthetic = self.build_synthetic()
        # Steps done (data and free); restored from checkpoints, drives the data stream.
        self.register_buffer("completed_steps", torch.zeros((), dtype=torch.long))

    # ---- what a subclass describes -------------------------------------------------------------
    @classmethod
    def sample_size(cls, config: MethodConfig) -> float:
        """Expected records per class (per-class sampling) or per step (global sampling)."""
        raise NotImplementedError

    @classmethod
    def data_steps(cls, config: MethodConfig) -> int:
        return config.iterations

    @classmethod
    def free_steps(cls, config: MethodConfig) -> int:
        return 0

    @classmethod
    def schedule(cls, config: MethodConfig) -> StepSchedule:
        """What this method asks of the privacy plan; known before the method is built."""
        return StepSchedule(
            private=cls.private,
            sampling=cls.sampling,
            sample_size=cls.sample_size(config),
            data_steps=cls.data_steps(config),
            free_steps=cls.free_steps(config),
            default_noise_multiplier=config.default_noise_multiplier,
            steps_adjustable=cls.steps_adjustable,
        )

    @classmethod
    def memory_needs(
        cls,
        config: MethodConfig,
        *,
        data: DataSpec,
        plan: PrivacyPlan,
        model: ModelConfig,
        device: torch.device,
    ) -> list[Need]:
        """What a run of this method holds in memory (methods/memory.py says what is counted).
        The base: the synthetic set, its gradient, SGD's momentum and the exported copy."""
        pixels = data.num_classes * config.ipc * math.prod(data.image_shape) * FLOAT
        return [
            Need("synthetic set (values, gradient, momentum, export)", 4 * pixels, "method.ipc")
        ]

    def build_synthetic(self) -> SyntheticSet:
        return PixelImages(
            num_classes=self.data.num_classes,
            ipc=self.config.ipc,
            image_shape=self.data.image_shape,
            generator=derive_generator(self.seed, "init"),
        )

    def condensation_step(self, batch: dict[str, Any], step: int) -> Tensor | None:
        """One data step on one sampled batch; returns the loss to log (or None)."""
        raise NotImplementedError

    def free_step(self, step: int) -> Tensor | None:
        """One step that reads no private data and spends nothing."""
        raise NotImplementedError(f"{type(self).__name__} declares free steps but no free_step")

    def configure_optimizers(self) -> torch.optim.Optimizer | None:
        return torch.optim.SGD(
            self.synthetic.parameters(), lr=self.config.lr_img, momentum=self.config.momentum
        )

    def on_fit_start(self) -> None:
        """Called once the module is on its device, before the first step."""

    def divergence_cause(self) -> str:
        """What most likely made the run diverge, naming the key to change."""
        return f"the learning rate method.lr_img={self.config.lr_img:g} is too large; lower it"

    # ---- shared machinery ----------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return self.completed_steps.device

    @property
    def world_size(self) -> int:
        return self.runtime.world_size

    @property
    def optimizer(self) -> torch.optim.Optimizer | None:
        """The synthetic set's optimiser, made once (the engine hands it to its trainer)."""
        if self._optimizer is None:
            self._optimizer = self.configure_optimizers()
        return self._optimizer

    @property
    def stage(self) -> str:
        """The next step's kind, for the progress bar: "sampling" (data) or "optimising" (free)."""
        return "sampling" if self.plan.is_data_step(int(self.completed_steps)) else "optimising"

    @property
    def noise_multiplier(self) -> float | None:
        return self.plan.noise_multiplier

    def log(self, name: str, value: Any, **options: Any) -> None:
        self.runtime.log(name, value, **options)

    def class_view(self) -> Tensor:
        """The synthetic images as [classes, ipc, C, H, W] (gradients flow to the parameters)."""
        return self.synthetic.class_view()

    def carry(self, name: str, state: Any) -> Any:
        """Keep ``state`` (anything with state_dict/load_state_dict) in checkpoints; returns it,
        restored if this run resumes from a checkpoint that holds it."""
        self._carried[name] = state
        if name in self._restored_carried:
            state.load_state_dict(self._restored_carried.pop(name))
        return state

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["carried_state"] = {
            name: state.state_dict() for name, state in self._carried.items()
        }
        checkpoint["noise_values_per_partition"] = self._noise_values_per_partition

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self._restored_carried = dict(checkpoint.get("carried_state", {}))
        self._noise_values_per_partition = int(checkpoint.get("noise_values_per_partition", 0))
        for name in list(self._restored_carried):
            if name in self._carried:
                self._carried[name].load_state_dict(self._restored_carried.pop(name))

    def setup(self, stage: str) -> None:
        if self.config.init == "real" and stage == "fit":
            self._init_from_real()

    def _init_from_real(self) -> None:
        if self.private:
            raise UserError(
                "method.init=real copies private images into the output; "
                "private methods need init=noise"
            )
        if not isinstance(self.synthetic, PixelImages):
            raise UserError("method.init=real needs a pixel synthetic set")
        pools = [self.runtime.class_images(c) for c in range(self.data.num_classes)]
        # The same draw as the random-real baseline of evaluate.py: DM starts from exactly that set.
        picks = random_class_picks(
            [len(pool) for pool in pools], ipc=self.config.ipc, seed=self.seed
        )
        with torch.no_grad():
            view = self.class_view()
            for c, (pool, pick) in enumerate(zip(pools, picks)):
                view[c].copy_(pool[pick].to(view.device))

    def run_step(self, batch: dict[str, Any]) -> Tensor | None:
        """One step (data or free) and its checks; returns the loss to log (or None)."""
        step = int(batch["step"])
        self.optimised = False
        try:
            loss = (
                self.condensation_step(batch, step)
                if self.plan.is_data_step(step)
                else self.free_step(step)
            )
            # Raised before the checkpoint is written: a checkpoint on disk is never a diverged one.
            if loss is not None and not torch.isfinite(loss):
                raise NumericalFault(f"the loss is {loss.item()}")
            if not all(torch.isfinite(p).all() for p in self.synthetic.parameters()):
                raise NumericalFault("the synthetic set holds NaN or Inf")
        except NumericalFault as fault:
            raise NumericalFault(
                fault.what, step=step, total=self.plan.total_steps, cause=self.divergence_cause()
            ) from None
        self._count_noise_drawn()
        self.completed_steps += 1
        return loss

    def optimise(self, loss: Tensor, *, replicated: bool = False) -> None:
        """One optimiser step on the synthetic set. DDP averages gradients over processes: a loss
        over this process's classes is scaled by the world size first (the average becomes the sum);
        a ``replicated`` loss (global sampling: equal everywhere) is not (the mean of equals)."""
        optimizer = self.optimizer
        optimizer.zero_grad(set_to_none=True)
        self.runtime.backward(loss if replicated else loss * self.world_size)
        self.runtime.step_optimizer(optimizer)
        self.optimised = True

    def synthetic_set(self) -> tuple[Tensor, Tensor]:
        return self.synthetic.export()
