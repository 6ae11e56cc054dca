"""``eval.engine=lightning``: a Lightning Trainer per run
(dpdc_lightning/engine/evaluation_module.py).

The path cross-checked against the reference evaluator
(benchmarks/results/faithfulness/evaluator_crosscheck.md);
the same batches and optimiser as the other engines, with Lightning running the loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from dpdc_lightning.evaluation.engines.base import Engine, EvalTask
from dpdc_lightning.evaluation.protocol import ProtocolSGD, training_batches

if TYPE_CHECKING:
    from dpdc_lightning.evaluation.progress import EvalProgress


class LightningEngine(Engine):
    name = "lightning"

    def __init__(self, device: torch.device, *, accelerator: str = "auto") -> None:
        super().__init__(device)
        self.accelerator = accelerator

    def train(
        self, task: EvalTask, runs: Sequence[int], *, progress: EvalProgress | None = None
    ) -> Any:
        from dpdc_lightning.engine.evaluation_module import EvaluationModule, fit

        (run,) = runs
        schedule, protocol = task.schedule, task.protocol
        images = task.images.detach().float().to(self.device)
        labels = task.labels.detach().long().to(self.device)
        module = EvaluationModule(
            task.build(run),
            make_optimizer=lambda params: ProtocolSGD(
                params,
                schedule=schedule,
                momentum=protocol.momentum,
                weight_decay=protocol.weight_decay,
            ),
        )
        trainer = fit(
            module,
            lambda: training_batches(
                images, labels, protocol=protocol, seed=task.seed, model=task.model, run=run
            ),
            total_steps=schedule.total_steps,
            steps_per_epoch=schedule.steps_per_epoch,
            accelerator=self.accelerator,
            epoch_done=None if progress is None else progress.epoch_done,
        )
        return module, trainer

    def test(
        self, trained: Any, test_images: Tensor, test_labels: Tensor, *, batch_size: int
    ) -> list[float]:
        from dpdc_lightning.engine.evaluation_module import accuracy

        module, trainer = trained
        return [
            accuracy(
                module,
                trainer,
                test_images.detach().float(),
                test_labels.detach().long(),
                batch_size=batch_size,
            )
        ]

    def networks(self, trained: Any) -> list[nn.Module]:
        module, _ = trained
        return [module.network.cpu().eval()]
