"""MethodModule: the LightningModule that runs a condensation method (methods/base.py).

The method states the maths of one step on a plain ``nn.Module``; this adapter gives it to a
Lightning Trainer: manual optimisation (the backward pass and the optimiser step through Lightning,
so DDP reduces gradients and precision plugins apply), the optimiser the method made, the number of
processes and a sum over them, logging, the private data stream for a real-image initialisation,
and checkpoints. A checkpoint holds the method's own state dict, with the keys it always had.
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from torch import Tensor

from dpdc_lightning.errors import UserError
from dpdc_lightning.methods.base import CondensationMethod, Runtime
from dpdc_lightning.privacy.mechanisms.noise_scope import RunNoise


class _LightningRuntime(Runtime):
    def __init__(self, module: MethodModule) -> None:
        self.module = module

    @property
    def world_size(self) -> int:  # type: ignore[override]
        trainer = self.module._trainer
        return 1 if trainer is None else trainer.world_size

    def backward(self, loss: Tensor) -> None:
        self.module.manual_backward(loss)

    def step_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        self.module.optimizers().step()

    def reduce_sum(self, tensor: Tensor) -> Tensor:
        return self.module.trainer.strategy.reduce(tensor, reduce_op="sum")

    def log(self, name: str, value: Any, **options: Any) -> None:
        self.module.log(name, value, **options)

    def class_images(self, class_index: int) -> Tensor:
        method = self.module.method
        if method.private:  # by construction: a private record reaches a method in its rows only
            raise UserError(
                f"method {method.config.name or type(method).__name__} read a class's private "
                "images outside its release: a private method reads records only inside "
                "release_rows (rule of docs/privacy.md, 'Where private records may flow')"
            )
        return self.module.trainer.datamodule.class_images(class_index)


class MethodModule(L.LightningModule):
    def __init__(self, method: CondensationMethod) -> None:
        super().__init__()
        self.method = method
        self.automatic_optimization = False
        method.runtime = _LightningRuntime(self)
        # Taken when the method is handed over, before any step of its code runs: its steps draw
        # noise keyed by this key only, and spend only events the mechanism made in them.
        self._noise = (
            RunNoise(
                method._noise_seed,
                reproducible=method._reproducible_noise,
                method=method.config.name or type(method).__name__,
            )
            if method.private
            else None
        )

    # ---- what the engine's callbacks and data stream read --------------------------------------
    @property
    def plan(self) -> Any:
        return self.method.plan

    @property
    def stage(self) -> str:
        return self.method.stage

    @property
    def completed_steps(self) -> Tensor:
        return self.method.completed_steps

    def pop_events(self) -> list:
        events = self.method.pop_events()
        if self._noise is not None:
            self._noise.claim(events)
        return events

    def synthetic_set(self) -> tuple[Tensor, Tensor]:
        return self.method.synthetic_set()

    # ---- checkpoints keep the method's keys (synthetic.images, completed_steps, ...) -----------
    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return self.method.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        return self.method.load_state_dict(state_dict, strict=strict, assign=assign)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.method.on_save_checkpoint(checkpoint)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.method.on_load_checkpoint(checkpoint)

    # ---- the loop --------------------------------------------------------------------------------
    def configure_optimizers(self) -> torch.optim.Optimizer | None:
        return self.method.optimizer

    def setup(self, stage: str) -> None:
        self.method.setup(stage)

    def on_fit_start(self) -> None:
        self.method.on_fit_start()

    def on_train_batch_start(self, batch: dict[str, Any], batch_idx: int) -> int | None:
        # -1 ends the epoch before the step runs, whatever trainer.min_steps says: no step past the
        # plan.
        return -1 if int(batch["step"]) >= self.method.plan.total_steps else None

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        if self._noise is None:
            loss = self.method.run_step(batch)
        else:
            with self._noise.active():
                loss = self.method.run_step(batch)
        if not self.method.optimised:
            self._idle_optimiser_step()
        if loss is not None:
            # Under DDP a per-class loss covers the process's own classes only: their sum is the
            # whole loss. Global sampling's loss is the same on every process.
            reduce = "mean" if self.method.sampling == "global_poisson" else "sum"
            self.log(
                "loss", loss.detach(), prog_bar=True, batch_size=1, sync_dist=True, reduce_fx=reduce
            )

    def _idle_optimiser_step(self) -> None:
        """A step that changes no parameter (no gradients: SGD skips them, momentum included), so
        that Lightning's global step, which counts optimiser steps, counts every condensation step:
        checkpoints come every ``checkpoint_every`` steps also where a method does not optimise
        (LDPDC, Dosser's sampling stage)."""
        optimizer = self.optimizers()
        if isinstance(optimizer, list):  # a method without an optimiser: nothing to count
            return
        optimizer.zero_grad(set_to_none=True)
        optimizer.step()
