"""The progress bar: stage, step, loss and ε, without Lightning's logger version column."""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.callbacks import TQDMProgressBar


class CondensationProgressBar(TQDMProgressBar):
    def get_metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, Any]:
        metrics = super().get_metrics(trainer, pl_module)
        metrics.pop("v_num", None)
        return metrics

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        # Methods with free steps (Dosser) sample first and optimise after: say which is running.
        super().on_train_batch_start(trainer, pl_module, batch, batch_idx)
        bar = getattr(self, "_train_progress_bar", None)
        if pl_module.plan.free_steps and bar is not None:
            bar.set_description(pl_module.stage)
