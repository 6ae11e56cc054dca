"""The engine interface: what an evaluation engine is given, and what it must do.

An engine trains groups of runs of one :class:`EvalTask` (``train``), tests what it trained on the
real test split (``test``), and hands the trained runs out as ordinary networks (``networks``).
Everything protocol-related (batches, DSA draws, schedule, SGD update) comes from
evaluation/protocol.py; an engine only decides how forward and backward are run.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from dpdc_lightning.config.auto import choose_device, choose_engine
from dpdc_lightning.evaluation.engines import check_engine
from dpdc_lightning.evaluation.protocol import EvalProtocol, Schedule, init_generator

if TYPE_CHECKING:
    from dpdc_lightning.evaluation.progress import EvalProgress


@dataclass(frozen=True, eq=False)
class EvalTask:
    """What is evaluated: the training set as trained on (PEA already applied), the architecture,
    the protocol and the seed that derives every run's draws."""

    images: Tensor
    labels: Tensor
    model: str
    num_classes: int
    protocol: EvalProtocol
    seed: int
    model_options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def schedule(self) -> Schedule:
        return self.protocol.schedule(len(self.images))

    def build(self, run: int) -> nn.Module:
        """Run ``run``'s freshly initialised network (on the CPU)."""
        from dpdc_lightning.models import build_network

        return build_network(
            self.model,
            channels=self.images.shape[1],
            num_classes=self.num_classes,
            image_size=(self.images.shape[2], self.images.shape[3]),
            generator=init_generator(self.seed, self.model, run),
            **dict(self.model_options),
        )


class Engine(ABC):
    """Trains runs of a task on ``device``."""

    name: str = ""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def groups(self, runs: Sequence[int]) -> list[list[int]]:
        """How ``runs`` are trained: one call of ``train`` per group (one run each, by default)."""
        return [[r] for r in runs]

    @abstractmethod
    def train(
        self, task: EvalTask, runs: Sequence[int], *, progress: EvalProgress | None = None
    ) -> Any:
        """Train runs ``runs`` of ``task``; returns what ``test`` and ``networks`` read."""

    @abstractmethod
    def test(
        self, trained: Any, test_images: Tensor, test_labels: Tensor, *, batch_size: int
    ) -> list[float]:
        """Accuracy in [0, 1] of every run of ``trained`` on the test split (eval mode)."""

    @abstractmethod
    def networks(self, trained: Any) -> list[nn.Module]:
        """The trained runs as ordinary networks (CPU, eval mode)."""


def resolve_device(accelerator: str) -> torch.device:
    """The device Lightning would pick for ``accelerator`` (config/auto.py's choose_device, with
    this machine's CUDA and MPS)."""
    return torch.device(
        choose_device(
            accelerator,
            cuda_available=torch.cuda.is_available(),
            mps_available=torch.backends.mps.is_available(),
        )
    )


def resolve_engine(engine: str, device: torch.device) -> str:
    """``eval.engine`` for ``device`` (``auto``: config/auto.py's choose_engine)."""
    return choose_engine(check_engine(engine), device_type=device.type)
