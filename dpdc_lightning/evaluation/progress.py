"""Progress of an evaluation on stderr, so an hour-long protocol is never silent: on a terminal one
bar for the current training (epochs) and one for the whole evaluation (trainings done of all
planned); in a log file or a pipe plain lines instead (dpdc_lightning/progress.py): one per finished
training and at most one every 20 s in between."""

from __future__ import annotations

import sys
from typing import Any

from dpdc_lightning.engine.progress import Throttle, interactive


class EvalProgress:
    """``overall(total)`` once, then ``start_run(label, epochs)`` / ``epoch_done(n)`` /
    ``end_run()`` per training. Disabled (no output) with ``enabled=False``."""

    def __init__(
        self, *, total_runs: int, enabled: bool = True, throttle: Throttle | None = None
    ) -> None:
        from tqdm.auto import tqdm

        self._tqdm, self.enabled, self.total_runs = tqdm, enabled, total_runs
        self.bars = enabled and interactive(sys.stderr)
        self._lines = throttle or Throttle() if enabled and not self.bars else None
        self._overall = tqdm(
            total=total_runs,
            desc="evaluation",
            unit="training",
            position=0,
            file=sys.stderr,
            disable=not self.bars,
            dynamic_ncols=True,
        )
        self._run: Any | None = None
        self._label, self._epochs, self._done = "", 0, 0

    def start_run(self, label: str, epochs: int) -> None:
        """``epochs``: the passes of one training, eval.epochs + 1 (the reference loops over
        ``range(Epoch + 1)``). Shown as the reference numbers them, epoch 0 to eval.epochs, so
        ``eval.epochs=300`` counts to 300/300, never to 301."""
        self._label, self._epochs = label, epochs
        self._run = self._tqdm(
            total=max(epochs - 1, 1),
            desc=label,
            unit="epoch",
            position=1,
            leave=False,
            file=sys.stderr,
            disable=not self.bars,
            dynamic_ncols=True,
        )

    def epoch_done(self, epochs: int) -> None:
        """``epochs`` passes are done: epoch ``epochs - 1`` of 0 .. eval.epochs."""
        if self._lines is not None and 0 < epochs < self._epochs:
            self._lines(f"{self._label}: epoch {epochs - 1}/{self._epochs - 1}")
        if self._run is not None:
            self._run.n = min(max(epochs - 1, 0), self._run.total)
            self._run.refresh()

    def end_run(self, accuracy: float | None = None) -> None:
        if self._run is not None:
            self._run.close()
            self._run = None
        self._done += 1
        if self._lines is not None:
            result = "" if accuracy is None else f" {100 * accuracy:.2f} %"
            self._lines(
                f"{self._label}:{result} ({self._done} of {self.total_runs} trainings done)",
                force=True,
            )
        if accuracy is not None:
            self._overall.set_postfix_str(f"last {100 * accuracy:.2f} %")
        self._overall.update(1)

    def close(self) -> None:
        if self._run is not None:
            self._run.close()
        self._overall.close()
