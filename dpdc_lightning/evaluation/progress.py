"""Progress of an evaluation on stderr: one bar for the current training (epochs) and one for the
whole evaluation (trainings done of all planned), so an hour-long protocol is never silent."""

from __future__ import annotations

import sys
from typing import Any, Optional

import lightning


class EvalProgress:
    """``overall(total)`` once, then ``start_run(label, epochs)`` / ``epoch_done(n)`` / ``end_run()``
    per training. Disabled (no output) with ``enabled=False``."""

    def __init__(self, *, total_runs: int, enabled: bool = True) -> None:
        from tqdm.auto import tqdm

        self._tqdm, self.enabled = tqdm, enabled
        self._overall = tqdm(total=total_runs, desc="evaluation", unit="training", position=0, file=sys.stderr,
                             disable=not enabled, dynamic_ncols=True)
        self._run: Optional[Any] = None

    def start_run(self, label: str, epochs: int) -> None:
        self._run = self._tqdm(total=epochs, desc=label, unit="epoch", position=1, leave=False, file=sys.stderr,
                               disable=not self.enabled, dynamic_ncols=True)

    def epoch_done(self, epochs: int) -> None:
        if self._run is not None:
            self._run.n = min(epochs, self._run.total)
            self._run.refresh()

    def end_run(self, accuracy: Optional[float] = None) -> None:
        if self._run is not None:
            self._run.close()
            self._run = None
        if accuracy is not None:
            self._overall.set_postfix_str(f"last {100 * accuracy:.2f} %")
        self._overall.update(1)

    def close(self) -> None:
        if self._run is not None:
            self._run.close()
        self._overall.close()


class EpochCallback(lightning.Callback):
    """Reports finished epochs (optimiser steps / steps per epoch) to an :class:`EvalProgress`."""

    def __init__(self, progress: EvalProgress, *, steps_per_epoch: int) -> None:
        self.progress, self.steps_per_epoch = progress, steps_per_epoch

    def on_train_batch_end(self, trainer: lightning.Trainer, *args: Any) -> None:
        step = trainer.global_step
        if step % self.steps_per_epoch == 0:
            self.progress.epoch_done(step // self.steps_per_epoch)
