"""The evaluation protocol in one place: its settings, its schedule, the batches of a run, the update.

Zhao & Bilen's protocol, as their reference code runs it (``evaluate_synset`` and ``epoch`` in
VICO-UoE/DatasetCondensation ``utils.py``, which the DPDC authors' code keeps; docs/evaluation.md):
SGD (lr 0.01, momentum 0.9, weight decay 5e-4), batch 256 reshuffled every pass, ``Epoch`` = 1000
epochs run as ``range(Epoch + 1)`` = 1001 passes, DSA on the normalised images (one family per batch
in single mode, parameters per image), lr x 0.1 after pass ``Epoch // 2 + 1`` with a freshly created
optimiser (momentum buffers dropped), network in train mode while training and eval mode for the
test; accuracy on the real test split, mean +- std over >= 5 freshly initialised networks.

Every engine (evaluation/engines/) trains on :func:`training_batches` with :class:`ProtocolSGD`, so
the engines differ only in how the forward and backward are run. Run ``r`` draws its initialisation, order and DSA parameters from generators derived from
``(seed, "eval", model, r[, "shuffle" | "dsa"])``: the same data whatever the engine and however
many runs are trained beside it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from dpdc_lightning.augment.dsa import MODES as DSA_MODES
from dpdc_lightning.errors import UserError
from dpdc_lightning.seeding import derive_generator

# Protocol values of the papers; a protocol below either is "reduced" and must say so.
PAPER_EPOCHS = 1000
PAPER_RUNS = 5


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

    def schedule(self, num_images: int) -> Schedule:
        """The optimiser steps of one run on ``num_images`` images."""
        steps_per_epoch = math.ceil(num_images / self.batch_size)
        return Schedule(
            steps_per_epoch=steps_per_epoch,
            total_steps=self.train_epochs * steps_per_epoch,
            decay_step=self.decay_epoch * steps_per_epoch,
            lr=self.lr,
        )

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
            if self.decay_epoch < self.train_epochs
            else "no lr decay (too few passes)",
            f"batch {self.batch_size}",
            f"DSA ({self.dsa_strategy}, mode {self.dsa_mode})" if self.dsa else "no DSA",
        ]
        if model:
            parts.insert(0, model)
        return ", ".join(parts)


@dataclass(frozen=True)
class Schedule:
    """Step counts of one run: ``total_steps`` optimiser steps, the lr x 0.1 (and the fresh optimiser
    of the reference, i.e. momentum buffers dropped) at ``decay_step``."""

    steps_per_epoch: int
    total_steps: int
    decay_step: int
    lr: float

    def lr_at(self, step: int) -> float:
        return self.lr if step < self.decay_step else self.lr * 0.1

    def restarts_at(self, step: int) -> bool:
        """Whether step ``step`` starts with fresh momentum buffers (the first step, and the decay)."""
        return step == 0 or step == self.decay_step


def check_inputs(
    images: Tensor, labels: Tensor, test_images: Tensor, test_labels: Tensor, num_classes: int
) -> None:
    """One-line ``UserError`` for a training or test set the evaluation cannot use."""
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
        raise UserError(f"num_classes must be an integer >= 2, got {num_classes!r}")
    for name, x, y in (("synthetic", images, labels), ("test", test_images, test_labels)):
        if x.dim() != 4:
            raise UserError(f"{name} images must have shape (N, C, H, W), got {tuple(x.shape)}")
        if y.dim() != 1 or len(y) != len(x):
            raise UserError(f"{name} labels must have shape ({len(x)},), got {tuple(y.shape)}")
        if len(x) == 0:
            raise UserError(f"{name} set is empty")
        if y.min() < 0 or y.max() >= num_classes:
            raise UserError(f"{name} labels must lie in [0, {num_classes - 1}]")
    if test_images.shape[1:] != images.shape[1:]:
        raise UserError(
            f"test images are {tuple(test_images.shape[1:])}, synthetic images are "
            f"{tuple(images.shape[1:])}; they must match"
        )


def init_generator(seed: int, model: str, run: int) -> torch.Generator:
    """Run ``run``'s network initialisation."""
    return derive_generator(seed, "eval", model, run)


def training_batches(
    images: Tensor, labels: Tensor, *, protocol: EvalProtocol, seed: int, model: str, run: int
) -> Iterator[tuple[Tensor, Tensor]]:
    """Run ``run``'s training batches, in order: one permutation per pass (the "shuffle" generator),
    split into batches (the last one may be short, as a shuffling DataLoader without ``drop_last``),
    each augmented by one DSA call (the "dsa" generator: one family per batch in single mode,
    parameters per image, not Siamese, as the reference's ``epoch()``)."""
    shuffle = derive_generator(seed, "eval", model, run, "shuffle")
    dsa_generator = derive_generator(seed, "eval", model, run, "dsa")
    dsa = None
    if protocol.dsa:
        from dpdc_lightning.augment import DSA

        dsa = DSA(protocol.dsa_strategy, mode=protocol.dsa_mode)
    for _ in range(protocol.train_epochs):
        order = torch.randperm(len(images), generator=shuffle)
        for index in order.split(protocol.batch_size):
            index = index.to(images.device, non_blocking=True)  # no wait for the GPU's queue
            x, y = images[index], labels[index]
            if dsa is not None:
                x = dsa(x, generator=dsa_generator, siamese=False)
            yield x, y


class ProtocolSGD(torch.optim.Optimizer):
    """The reference's optimiser over one run: SGD at the schedule's lr, replaced at the decay step by a
    fresh one (its momentum buffers dropped), as ``evaluate_synset`` does. The update is
    ``torch.optim.SGD``'s (dampening 0, no Nesterov) written on tensor lists: ``d = g + wd * w``;
    ``b = d`` on the first step after a (re)start, else ``b = momentum * b + d``; ``w -= lr * b``.
    Every engine steps this optimiser, so the update is one piece of code for all of them."""

    def __init__(
        self, params: Iterable[Tensor], *, schedule: Schedule, momentum: float, weight_decay: float
    ) -> None:
        super().__init__(params, {"lr": schedule.lr})
        self.schedule, self.momentum, self.weight_decay = schedule, momentum, weight_decay
        self.steps = 0
        self.buffers: list[Tensor] | None = None

    @torch.no_grad()
    def step(self, closure: Callable[[], Tensor] | None = None) -> Tensor | None:  # type: ignore[override]
        loss = None
        if (
            closure is not None
        ):  # Lightning's automatic optimisation hands the forward and backward in
            with torch.enable_grad():
                loss = closure()
        if self.schedule.restarts_at(self.steps):
            self.buffers = None
        lr = self.schedule.lr_at(self.steps)
        params = [p for group in self.param_groups for p in group["params"]]
        for group in self.param_groups:
            group["lr"] = lr
        update = [p.grad for p in params]
        if self.weight_decay:
            update = torch._foreach_add(update, params, alpha=self.weight_decay)
        if self.buffers is None or self.momentum == 0:
            self.buffers = [u.clone() for u in update]
        else:
            torch._foreach_mul_(self.buffers, self.momentum)
            torch._foreach_add_(self.buffers, update)
        torch._foreach_add_(params, self.buffers, alpha=-lr)
        self.steps += 1
        return loss
