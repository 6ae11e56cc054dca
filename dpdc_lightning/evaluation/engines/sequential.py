"""``eval.engine=sequential``: the runs one after another, every step through one shared step
function.

On a CPU this is the fast engine: the step is bound by memory-heavy elementwise work that
compilation fuses, while stacking runs (stacked.py) only makes the convolutions grouped, which CPU
kernels run slower. Its training and test graphs are compiled as ``compile`` says (cost.py decides
for ``eval.compile=auto``); the step function, compiled graphs included, is shared with every later
evaluation of the same architecture and input shape in the process (functional.shared_step).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from dpdc_lightning.evaluation.engines.base import Engine, EvalTask
from dpdc_lightning.evaluation.engines.cost import CompilePlan
from dpdc_lightning.evaluation.engines.functional import RunState, shared_step
from dpdc_lightning.evaluation.protocol import training_batches

if TYPE_CHECKING:
    from dpdc_lightning.evaluation.progress import EvalProgress


class SequentialEngine(Engine):
    name = "sequential"
    vmapped = False

    def __init__(
        self,
        device: torch.device,
        *,
        compile: CompilePlan = CompilePlan(),  # noqa: B008 (frozen)
    ) -> None:
        super().__init__(device)
        self.compile = compile

    def train(
        self, task: EvalTask, runs: Sequence[int], *, progress: EvalProgress | None = None
    ) -> RunState:
        images = task.images.detach().float().to(self.device)
        labels = task.labels.detach().long().to(self.device)
        networks = [task.build(r).to(self.device) for r in runs]
        key = (
            task.model,
            tuple(sorted(task.model_options.items())),
            tuple(images.shape[1:]),
            task.num_classes,
            str(self.device),
        )
        schedule = task.schedule
        state = RunState(
            networks,
            shared_step(key, networks[0], vmapped=self.vmapped),
            protocol=task.protocol,
            schedule=schedule,
            compile=self.compile,
        )
        streams = [
            training_batches(
                images, labels, protocol=task.protocol, seed=task.seed, model=task.model, run=r
            )
            for r in runs
        ]
        for step in range(schedule.total_steps):
            state.step(*self.batch([next(s) for s in streams]))
            if progress is not None and (step + 1) % schedule.steps_per_epoch == 0:
                progress.epoch_done((step + 1) // schedule.steps_per_epoch)
        return state

    def batch(self, batches: list[tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor]:
        ((x, y),) = batches
        return x, y

    def test(
        self, trained: RunState, test_images: Tensor, test_labels: Tensor, *, batch_size: int
    ) -> list[float]:
        return trained.accuracies(test_images, test_labels, batch_size=batch_size)

    def networks(self, trained: RunState) -> list[nn.Module]:
        return trained.networks()
