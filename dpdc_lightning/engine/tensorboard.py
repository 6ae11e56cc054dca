"""TensorBoard for a run: ε, loss and the synthetic grid per step; the run's settings in the
hparams tab; evaluation accuracies once evaluated. Nothing constant or duplicated."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import TensorBoardLogger

from dpdc_lightning.privacy.receipts.run_files import EVAL_TENSORBOARD_DIR, HPARAMS_FILE


def flat_hparams(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested settings -> ``{"method.ipc": 10, ...}`` with values TensorBoard can show."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flat_hparams(value, f"{name}."))
        elif isinstance(value, (bool, int, float, str)):
            flat[name] = value
        else:
            flat[name] = str(value)
    return flat


class RunLogger(TensorBoardLogger):
    """Lightning's TensorBoard logger without its constant ``epoch`` scalar (a condensation is one
    epoch) and with the run's own settings in the hparams tab (the method module has none)."""

    def __init__(
        self, *args: Any, hparams: Mapping[str, Any], hp_metrics: Mapping[str, float], **kwargs: Any
    ) -> None:
        super().__init__(*args, default_hp_metric=False, **kwargs)
        self._run_hparams, self._hp_metrics = dict(hparams), dict(hp_metrics)
        self._hparams_written = False
        self._writing_hparams = False

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        if self._writing_hparams:
            # The hparams tab reads its metric columns from the run's own scalars (e.g. "epsilon",
            # logged every step); a second, constant point at step 0 would only blur that curve.
            return
        if not self._hparams_written:  # first write of the run: its settings go in first
            self.log_hyperparams({})
        metrics = {k: v for k, v in metrics.items() if k != "epoch"}
        if metrics:
            super().log_metrics(metrics, step)

    def log_hyperparams(
        self, params: Any, metrics: Mapping[str, Any] | None = None, step: int | None = None
    ) -> None:
        # Lightning may call this with the module's (empty) hparams; write the run's settings once
        # instead.
        if self._hparams_written:
            return
        self._hparams_written, self._writing_hparams = True, True
        try:
            super().log_hyperparams(
                self._run_hparams, dict(self._hp_metrics) or {"epsilon": float("nan")}
            )
        finally:
            self._writing_hparams = False
        # Lightning wrote hparams.yaml at fit start with the module's empty hparams and never
        # rewrites an existing file: remove it so the save at the end of the run writes these
        # settings.
        (Path(self.log_dir) / HPARAMS_FILE).unlink(missing_ok=True)


def log_evaluation(run_dir: Path, results: Mapping[str, list[float]], *, protocol: str) -> None:
    """Evaluation accuracies (percent) into the run's TensorBoard folder: one scalar per run and
    the mean, under ``eval/<protocol>/<model>``, in a folder of their own (a reader's output, sealed
    apart from the training log: privacy/receipts/run_files.py)."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(Path(run_dir) / EVAL_TENSORBOARD_DIR))
    try:
        for model, accuracies in results.items():
            tag = f"eval/{protocol}/{model}"
            for index, accuracy in enumerate(accuracies):
                writer.add_scalar(f"{tag}/run_accuracy", accuracy, index)
            if accuracies:
                writer.add_scalar(f"{tag}/mean_accuracy", sum(accuracies) / len(accuracies), 0)
    finally:
        writer.close()
