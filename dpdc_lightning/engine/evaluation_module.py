"""The Lightning side of ``eval.engine=lightning``: a LightningModule that trains one evaluation
network on the protocol's batches with the protocol's optimiser, a Trainer per run, and the test
pass.

The batches (order and DSA) come from evaluation/protocol.py ``training_batches`` and the update
from its ``ProtocolSGD``, exactly as the trainer-free engines use them; Lightning runs the loop,
moves the data to the accelerator and switches train and eval mode. evaluation/engines/lightning.py
calls this.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import lightning
import torch
import torch.nn.functional as F
from lightning.pytorch.utilities.warnings import PossibleUserWarning
from torch import Tensor, nn
from torch.utils.data import DataLoader, IterableDataset


class EvaluationModule(lightning.LightningModule):
    """A classifier trained on a synthetic set and tested on real data; ``make_optimizer`` builds
    the protocol's optimiser over the network's parameters."""

    def __init__(
        self,
        network: nn.Module,
        *,
        make_optimizer: Callable[[Iterable[Tensor]], torch.optim.Optimizer],
    ) -> None:
        super().__init__()
        self.network = network
        self.make_optimizer = make_optimizer
        self.correct, self.seen = 0, 0

    def forward(self, x: Tensor) -> Tensor:
        return self.network(x)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        images, labels = batch  # already augmented by the protocol's stream
        return F.cross_entropy(self.network(images), labels)

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        images, labels = batch
        self.correct += int((self.network(images).argmax(dim=1) == labels).sum())
        self.seen += len(labels)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return self.make_optimizer(self.network.parameters())


class _Batches(IterableDataset):
    """The protocol's batches of one run, handed to Lightning as they are (``batch_size=None``)."""

    def __init__(self, batches: Callable[[], Iterator[tuple[Tensor, Tensor]]]) -> None:
        self.batches = batches

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        return self.batches()


class _EpochCallback(lightning.Callback):
    """Reports finished protocol epochs (optimiser steps / steps per epoch) to ``epoch_done``."""

    def __init__(self, epoch_done: Callable[[int], None], *, steps_per_epoch: int) -> None:
        self.epoch_done, self.steps_per_epoch = epoch_done, steps_per_epoch

    def on_train_batch_end(self, trainer: lightning.Trainer, *args: Any) -> None:
        if trainer.global_step % self.steps_per_epoch == 0:
            self.epoch_done(trainer.global_step // self.steps_per_epoch)


def fit(
    module: EvaluationModule,
    batches: Callable[[], Iterator[tuple[Tensor, Tensor]]],
    *,
    total_steps: int,
    steps_per_epoch: int,
    accelerator: str,
    epoch_done: Callable[[int], None] | None = None,
) -> lightning.Trainer:
    """Train ``module`` for exactly ``total_steps`` optimiser steps on ``batches()``; returns its
    Trainer."""
    callbacks = (
        [] if epoch_done is None else [_EpochCallback(epoch_done, steps_per_epoch=steps_per_epoch)]
    )
    with quiet_lightning():
        trainer = lightning.Trainer(
            max_epochs=1,
            max_steps=total_steps,
            accelerator=accelerator,
            devices=1,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
            limit_val_batches=0,
            use_distributed_sampler=False,
            callbacks=callbacks,
        )
        trainer.fit(module, train_dataloaders=_loader(_Batches(batches)))
    if trainer.global_step != total_steps:
        raise RuntimeError(
            f"evaluation trained {trainer.global_step} steps, protocol needs {total_steps}"
        )
    return trainer


def accuracy(
    module: EvaluationModule,
    trainer: lightning.Trainer,
    test_images: Tensor,
    test_labels: Tensor,
    *,
    batch_size: int,
) -> float:
    """Accuracy in [0, 1] of ``module`` on the test split, in batches of ``batch_size`` (eval
    mode)."""
    batches = [
        (test_images[i : i + batch_size], test_labels[i : i + batch_size])
        for i in range(0, len(test_images), batch_size)
    ]
    module.correct, module.seen = 0, 0
    with quiet_lightning():
        trainer.test(module, dataloaders=_loader(batches), verbose=False)
    return module.correct / module.seen


def _loader(batches: Any) -> DataLoader:
    # Batches are handed over whole. A DataLoader draws a base seed per iterator (unused without
    # workers), from the global RNG unless it has a generator: give it one, and touch nothing
    # global.
    return DataLoader(batches, batch_size=None, num_workers=0, generator=torch.Generator())


@contextlib.contextmanager
def quiet_lightning() -> Iterator[None]:
    """Silence Lightning's banners, tips and small-data warnings for the inner trainings only.

    Logger levels and warning filters are restored on exit, so the caller's Lightning output
    (the condensation run's progress, its own warnings) is untouched.
    """
    names = (
        "lightning",
        "lightning.pytorch",
        "lightning.fabric",
        "pytorch_lightning",
        "lightning_fabric",
    )
    loggers = [logging.getLogger(name) for name in names]
    levels = [lg.level for lg in loggers]
    try:
        for lg in loggers:
            lg.setLevel(logging.WARNING)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=PossibleUserWarning)
            warnings.filterwarnings("ignore", message=".*does not have many workers.*")
            warnings.filterwarnings("ignore", message=".*GPU available but not used.*")
            # Lightning's own loader code trips a torch deprecation; nothing the caller can act on.
            warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
