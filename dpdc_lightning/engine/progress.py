"""Progress of a condensation: a bar on a terminal, plain lines elsewhere.

On a terminal, a tqdm bar shows the stage, step, loss and ε (without Lightning's logger version
column). In a log file or a pipe, carriage-return bars become hundreds of glued lines, so
:class:`ProgressLines` writes plain lines instead: one when the run starts, one when a stage starts
(Dosser: sampling, then optimising), at most one per ``interval`` seconds in between, and one at the
end. :func:`say` prints a message on its own line whichever is in use.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

import lightning as L
from lightning.pytorch.callbacks import TQDMProgressBar

from dpdc_lightning.privacy.display import epsilon_text

LINE_INTERVAL = (
    20.0  # seconds between two plain progress lines of one stage: three a minute at most
)


def interactive(stream: TextIO) -> bool:
    """Whether ``stream`` is a terminal (a bar redraws in place there; elsewhere it piles up)."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # replaced or closed streams (pytest's capture, notebooks)
        return False


def say(line: str, *, stream: TextIO | None = None) -> None:
    """Print ``line`` on its own line (stderr by default): open tqdm bars are lifted first and
    redrawn after, so a message never lands on the end of a bar."""
    from tqdm import tqdm

    tqdm.write(line, file=stream or sys.stderr)


class Throttle:
    """Lets a line through when forced or when ``interval`` seconds passed since the last one (or
    since it was made)."""

    def __init__(
        self, interval: float = LINE_INTERVAL, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.interval, self.clock, self.last = interval, clock, clock()

    def __call__(self, line: str, *, force: bool = False, stream: TextIO | None = None) -> None:
        now = self.clock()
        if force or now - self.last >= self.interval:
            self.last = now
            print(line, file=stream or sys.stderr, flush=True)


class CondensationProgressBar(TQDMProgressBar):
    def get_metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, Any]:
        metrics = super().get_metrics(trainer, pl_module)
        metrics.pop("v_num", None)
        return metrics

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        # Methods with free steps (Dosser) sample first and optimise after: say which is running.
        super().on_train_batch_start(trainer, pl_module, batch, batch_idx)
        bar = getattr(self, "_train_progress_bar", None)
        if pl_module.plan.free_steps and bar is not None:
            bar.set_description(pl_module.stage)

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        # Close the bar (ending its line) so that the error or Ctrl-C line that follows starts
        # afresh.
        bar = getattr(self, "_train_progress_bar", None)
        if bar is not None:
            bar.close()


class ProgressLines(L.Callback):
    """Plain progress lines on stderr for a run whose output is not a terminal."""

    def __init__(self, throttle: Throttle | None = None) -> None:
        self.throttle = throttle or Throttle()
        self.stage: str | None = None

    def _line(self, pl_module: L.LightningModule, *, force: bool) -> None:
        if not pl_module.trainer.is_global_zero:  # one process speaks for a multi-process run
            return
        metrics = {
            k: float(v)
            for k, v in pl_module.trainer.progress_bar_metrics.items()
            if k in ("loss", "epsilon")
        }
        done, total = int(pl_module.completed_steps), pl_module.plan.total_steps
        shown = ", ".join(
            f"ε {epsilon_text(v)}" if k == "epsilon" else f"{k} {v:.4g}"
            for k, v in sorted(metrics.items())
        )
        self.throttle(
            f"step {done}/{total}"
            + (f" ({self.stage})" if pl_module.plan.free_steps else "")
            + (f": {shown}" if shown else ""),
            force=force,
        )

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.stage = pl_module.stage
        if not trainer.is_global_zero:
            return
        self.throttle(
            "condensing: "
            f"{pl_module.plan.total_steps - int(pl_module.completed_steps)} steps to run"
            + (f", starting with {self.stage}" if pl_module.plan.free_steps else ""),
            force=True,
        )

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any
    ) -> None:
        stage = pl_module.stage
        if stage != self.stage and int(pl_module.completed_steps) < pl_module.plan.total_steps:
            self._line(pl_module, force=True)
            self.stage = stage
            if trainer.is_global_zero:
                self.throttle(f"stage: {stage}", force=True)
            return
        self._line(pl_module, force=False)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._line(pl_module, force=True)
