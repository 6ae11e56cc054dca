"""The evaluation protocol: train fresh networks on a synthetic set, test on the real test split.

Zhao & Bilen's protocol (DESIGN section 6), as their reference code runs it (``evaluate_synset``
and ``epoch`` in VICO-UoE/DatasetCondensation ``utils.py``, which the DPDC authors' code keeps; see
docs/evaluation.md): SGD (lr 0.01, momentum 0.9, weight decay 5e-4),
batch 256 reshuffled every pass, ``Epoch`` = 1000 epochs run as ``range(Epoch + 1)`` = 1001
passes, DSA on the normalised images (one family per batch in single mode, parameters per image),
lr x 0.1 after pass ``Epoch // 2 + 1`` with a freshly created optimiser (momentum buffers dropped),
network in train mode while training and eval mode for the test; accuracy on the real test split,
mean +- std over >= 5 freshly initialised networks.

A synthetic set is tiny (500 images = 2 batches), so 1000 real epochs would mostly measure
Lightning's per-epoch bookkeeping. The loader therefore hands Lightning several protocol epochs per
Lightning "epoch" (each protocol epoch is still its own reshuffle of the whole set) and training
stops at exactly ``train_epochs * batches_per_epoch`` optimiser steps; the lr milestone is counted
in steps at the same boundary, so step count and schedule equal the protocol's exactly.
"""

from __future__ import annotations

import contextlib
import logging
import math
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import lightning
import torch
import torch.nn.functional as F
from lightning.pytorch.utilities.warnings import PossibleUserWarning
from torch import Tensor, nn
from torch.utils.data import BatchSampler, DataLoader, Sampler, SequentialSampler, TensorDataset
from torchmetrics.classification import MulticlassAccuracy

from dpdc_lightning.augment.dsa import MODES as DSA_MODES
from dpdc_lightning.errors import UserError
from dpdc_lightning.evaluation.stacked import check_inputs, resolve_device, resolve_engine, train_and_test_direct
from dpdc_lightning.seeding import derive_generator

if TYPE_CHECKING:
    from dpdc_lightning.evaluation.progress import EvalProgress

# Protocol values of the papers; a protocol below either is "reduced" and must say so.
PAPER_EPOCHS = 1000
PAPER_RUNS = 5

# Optimiser steps per Lightning epoch we aim for; a few dozen makes the per-epoch hooks negligible
# next to the steps themselves.
_STEPS_PER_LOADER_PASS = 64


@dataclass(frozen=True)
class EvalProtocol:
    """How a synthetic set is evaluated; the defaults are the papers' protocol."""

    epochs: int = PAPER_EPOCHS
    runs: int = PAPER_RUNS
    lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 5e-4
    batch_size: int = 256
    dsa: bool = True
    dsa_strategy: str = "color_crop_cutout_flip_scale_rotate"
    dsa_mode: str = "single"  # one DSA family per batch (the reference's), or "all" of them
    lr_decay_at: float = 0.5  # lr x 0.1 after pass int(lr_decay_at * epochs) + 1, as the reference
    test_batch_size: int = 1024

    def __post_init__(self) -> None:
        positive_ints = {
            "epochs": self.epochs,
            "runs": self.runs,
            "batch_size": self.batch_size,
            "test_batch_size": self.test_batch_size,
        }
        for key, value in positive_ints.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UserError(f"evaluation {key} must be a positive integer, got {value!r}")
        if not self.lr > 0:
            raise UserError(f"evaluation lr must be > 0, got {self.lr!r}")
        if not 0 <= self.momentum < 1:
            raise UserError(f"evaluation momentum must be in [0, 1), got {self.momentum!r}")
        if not self.weight_decay >= 0:
            raise UserError(f"evaluation weight_decay must be >= 0, got {self.weight_decay!r}")
        if not 0 < self.lr_decay_at <= 1:
            raise UserError(f"evaluation lr_decay_at must be in (0, 1], got {self.lr_decay_at!r}")
        if self.dsa_mode not in DSA_MODES:
            raise UserError(
                f"evaluation dsa_mode must be one of {', '.join(DSA_MODES)}, got {self.dsa_mode!r}"
            )

    def is_reduced(self) -> bool:
        """True when fewer epochs or runs than the papers' protocol are used."""
        return self.epochs < PAPER_EPOCHS or self.runs < PAPER_RUNS

    @property
    def train_epochs(self) -> int:
        """Passes over the synthetic set: the reference loops ``range(Epoch + 1)``."""
        return self.epochs + 1

    @property
    def decay_epoch(self) -> int:
        """Passes trained at the initial lr.

        The reference decays after pass ``Epoch // 2 + 1`` (``lr_schedule = [Epoch//2+1]``, checked
        after the pass), i.e. passes 0 .. Epoch//2+1 run at the initial lr; never more than all.
        """
        return min(self.train_epochs, int(self.lr_decay_at * self.epochs) + 2)

    def describe(self, model: str | None = None) -> str:
        """One line naming every protocol setting, flagging each reduced one."""
        epochs = f"{self.epochs} epochs"
        if self.epochs < PAPER_EPOCHS:
            epochs += f" (reduced; paper {PAPER_EPOCHS})"
        runs = f"{self.runs} run" + ("s" if self.runs != 1 else "")
        if self.runs < PAPER_RUNS:
            runs += f" (reduced; paper >={PAPER_RUNS})"
        parts = [
            epochs,
            runs,
            f"{self.train_epochs} passes (range(epochs + 1), as the reference)",
            f"SGD (lr {self.lr:g}, momentum {self.momentum:g}, wd {self.weight_decay:g})",
            f"lr x0.1 and momentum reset after {self.decay_epoch} passes"
            if self.decay_epoch < self.train_epochs else "no lr decay (too few passes)",
            f"batch {self.batch_size}",
            f"DSA ({self.dsa_strategy}, mode {self.dsa_mode})" if self.dsa else "no DSA",
        ]
        if model:
            parts.insert(0, model)
        return ", ".join(parts)


class SyntheticClassifier(lightning.LightningModule):
    """A classifier trained on a synthetic set with per-image DSA and tested on real data.

    ``steps_per_epoch`` is the number of optimiser steps of one protocol pass; the lr decay
    happens after ``protocol.decay_epoch`` such passes.
    """

    def __init__(
        self,
        network: nn.Module,
        *,
        num_classes: int,
        protocol: EvalProtocol,
        steps_per_epoch: int,
        dsa_generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        self.network = network
        self.protocol = protocol
        self.steps_per_epoch = int(steps_per_epoch)
        self.dsa = None
        if protocol.dsa:
            from dpdc_lightning.augment import DSA

            if dsa_generator is None:
                raise ValueError("protocol.dsa needs a dsa_generator")
            self.dsa = DSA(protocol.dsa_strategy, mode=protocol.dsa_mode)
        self.dsa_generator = dsa_generator
        self.test_accuracy = MulticlassAccuracy(num_classes=num_classes, average="micro")

    def forward(self, x: Tensor) -> Tensor:
        return self.network(x)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        images, labels = batch
        if self.dsa is not None:
            # One draw per batch, parameters per image (not Siamese), as the reference's epoch():
            # in single mode the batch shares one family, each image gets its own values.
            images = self.dsa(images, generator=self.dsa_generator, siamese=False)
        return F.cross_entropy(self.network(images), labels)

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        images, labels = batch
        self.test_accuracy.update(self.network(images).argmax(dim=1), labels)
        self.log("test_accuracy", self.test_accuracy, on_step=False, on_epoch=True,
                 batch_size=len(labels))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        p = self.protocol
        return torch.optim.SGD(
            self.network.parameters(), lr=p.lr, momentum=p.momentum, weight_decay=p.weight_decay
        )

    def on_train_batch_start(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        # The reference replaces the optimiser at the decay point (a new SGD at lr x 0.1), which
        # also drops the momentum buffers; lowering the lr and clearing the SGD state is the same.
        # Counted in optimiser steps so it holds however many protocol passes a loader pass holds.
        if self.trainer.global_step == self.protocol.decay_epoch * self.steps_per_epoch:
            optimizer = self.trainer.optimizers[0]
            for group in optimizer.param_groups:
                group["lr"] = self.protocol.lr * 0.1
            optimizer.state.clear()


class EpochBatchSampler(Sampler[Tensor]):
    """Index batches for ``epochs_per_pass`` protocol epochs, each a fresh permutation.

    Within an epoch the batches partition a permutation of all samples (the last one may be
    short, as a shuffling DataLoader without ``drop_last`` gives).
    """

    def __init__(
        self, num_samples: int, *, batch_size: int, epochs_per_pass: int, generator: torch.Generator
    ) -> None:
        self.num_samples = int(num_samples)
        self.batch_size = int(batch_size)
        self.epochs_per_pass = int(epochs_per_pass)
        self.generator = generator

    @property
    def steps_per_epoch(self) -> int:
        return math.ceil(self.num_samples / self.batch_size)

    def __len__(self) -> int:
        return self.epochs_per_pass * self.steps_per_epoch

    def __iter__(self) -> Iterator[Tensor]:
        for _ in range(self.epochs_per_pass):
            order = torch.randperm(self.num_samples, generator=self.generator)
            yield from order.split(self.batch_size)


def train_and_test(
    images: Tensor,
    labels: Tensor,
    *,
    test_images: Tensor,
    test_labels: Tensor,
    model: str,
    num_classes: int,
    protocol: EvalProtocol,
    seed: int,
    model_options: dict | None = None,
    accelerator: str = "auto",
    pea: bool = False,
    progress: EvalProgress | None = None,
    engine: str = "auto",
    compile: str | bool = "auto",
) -> list[float]:
    """Train ``protocol.runs`` fresh ``model`` networks on (images, labels); test each on the
    real split. Returns one accuracy in [0, 1] per run.

    Every random draw of run ``r`` (initialisation, shuffling, DSA) comes from generators derived
    from ``(seed, "eval", model, r)``, so equal arguments give equal accuracies on one device.
    ``engine`` (stacked.ENGINES) is how the runs are trained: a Lightning Trainer per run, or the
    trainer-free loop of :mod:`~dpdc_lightning.evaluation.stacked` (runs one after another or
    stacked; ``compile`` as there); auto picks the one measured fastest on the device.
    """
    check_inputs(images, labels, test_images, test_labels, num_classes)
    device = resolve_device(accelerator)
    engine = resolve_engine(engine, device)
    if pea:  # once, here, for every engine
        from dpdc_lightning.augment.pea import partition_and_expand

        images, labels = partition_and_expand(images.detach().float().cpu(), labels.detach().long().cpu())
    if engine != "lightning":
        return train_and_test_direct(images, labels, test_images=test_images, test_labels=test_labels, model=model,
                                     num_classes=num_classes, protocol=protocol, seed=seed, model_options=model_options,
                                     device=device, stacked=engine == "stacked", compile=compile, progress=progress)
    test_set = TensorDataset(test_images.detach().float().cpu(), test_labels.detach().long().cpu())
    test_loader = DataLoader(
        test_set,
        sampler=BatchSampler(SequentialSampler(test_set), protocol.test_batch_size, False),
        batch_size=None,  # the sampler yields whole batches; TensorDataset indexes them at once
        num_workers=0,
        # A DataLoader draws a base seed per iterator; without a generator it takes the global RNG.
        generator=derive_generator(seed, "eval", "test-loader"),
    )
    accuracies: list[float] = []
    for run in range(protocol.runs):
        if progress is not None:
            progress.start_run(f"{model} run {run + 1}/{protocol.runs}", protocol.train_epochs)
        module, trainer = _fit(images, labels, model=model, num_classes=num_classes, protocol=protocol, seed=seed,
                               run=run, model_options=model_options, accelerator=accelerator, pea=False,
                               progress=progress)
        with quiet_lightning():
            (metrics,) = trainer.test(module, dataloaders=test_loader, verbose=False)
        accuracies.append(float(metrics["test_accuracy"]))
        if progress is not None:
            progress.end_run(accuracies[-1])
    return accuracies


def train_network(
    images: Tensor,
    labels: Tensor,
    *,
    model: str,
    num_classes: int,
    protocol: EvalProtocol,
    seed: int,
    run: int = 0,
    model_options: dict | None = None,
    accelerator: str = "auto",
    pea: bool = False,
) -> nn.Module:
    """Run ``run`` of the protocol on (images, labels) and return the trained network (eval mode,
    on the CPU): the same network :func:`train_and_test` would test, for attacks that query it."""
    check_inputs(images, labels, images[:1], labels[:1], num_classes)
    module, _ = _fit(images, labels, model=model, num_classes=num_classes, protocol=protocol, seed=seed, run=run,
                     model_options=model_options, accelerator=accelerator, pea=pea)
    return module.network.cpu().eval()


def _fit(images: Tensor, labels: Tensor, *, model: str, num_classes: int, protocol: EvalProtocol, seed: int,
         run: int, model_options: dict | None, accelerator: str, pea: bool,
         progress: EvalProgress | None = None) -> tuple[SyntheticClassifier, lightning.Trainer]:
    """Train one fresh network (run ``run``'s generators); returns the module and its trainer."""
    images = images.detach().float().cpu()
    labels = labels.detach().long().cpu()
    if pea:
        from dpdc_lightning.augment.pea import partition_and_expand

        images, labels = partition_and_expand(images, labels)
    train_set = TensorDataset(images, labels)
    steps_per_epoch = math.ceil(len(train_set) / protocol.batch_size)
    epochs_per_pass = min(protocol.train_epochs, max(1, _STEPS_PER_LOADER_PASS // steps_per_epoch))
    total_steps = protocol.train_epochs * steps_per_epoch

    from dpdc_lightning.models import build_network

    callbacks = []
    if progress is not None:
        from dpdc_lightning.evaluation.progress import EpochCallback

        callbacks = [EpochCallback(progress, steps_per_epoch=steps_per_epoch)]
    network = build_network(
        model,
        channels=images.shape[1],
        num_classes=num_classes,
        image_size=(images.shape[2], images.shape[3]),
        generator=derive_generator(seed, "eval", model, run),
        **(model_options or {}),
    )
    module = SyntheticClassifier(
        network,
        num_classes=num_classes,
        protocol=protocol,
        steps_per_epoch=steps_per_epoch,
        dsa_generator=derive_generator(seed, "eval", model, run, "dsa"),
    )
    sampler = EpochBatchSampler(
        len(train_set),
        batch_size=protocol.batch_size,
        epochs_per_pass=epochs_per_pass,
        generator=derive_generator(seed, "eval", model, run, "shuffle"),
    )
    train_loader = DataLoader(
        train_set,
        sampler=sampler,
        batch_size=None,
        num_workers=0,
        generator=derive_generator(seed, "eval", model, run, "loader"),
    )
    with quiet_lightning():
        trainer = lightning.Trainer(
            max_epochs=math.ceil(protocol.train_epochs / epochs_per_pass),
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
        trainer.fit(module, train_dataloaders=train_loader)
    if trainer.global_step != total_steps:
        raise RuntimeError(f"evaluation trained {trainer.global_step} steps, protocol needs {total_steps}")
    return module, trainer


@contextlib.contextmanager
def quiet_lightning() -> Iterator[None]:
    """Silence Lightning's banners, tips and small-data warnings for the inner trainings only.

    Logger levels and warning filters are restored on exit, so the caller's Lightning output
    (the condensation run's progress, its own warnings) is untouched.
    """
    names = ("lightning", "lightning.pytorch", "lightning.fabric",
             "pytorch_lightning", "lightning_fabric")
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

