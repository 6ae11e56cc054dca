"""A run's course: a logged value (ε, the loss) against the condensation step.

Loss values spanning more than two decades, all positive, get a log axis; a horizontal dotted line
marks a reference value when one is given (the accounted ε of privacy.json).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from dpdc_lightning.plots.canvas import colour, render

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def against_steps_png(
    steps: Sequence[int],
    values: Sequence[float],
    *,
    ylabel: str,
    title: str,
    index: int = 0,
    reference: tuple[str, float] | None = None,
) -> bytes:
    """``values`` against ``steps`` as PNG bytes, in colour ``index``; ``reference``: (label, y)."""

    def draw(figure: Figure) -> None:
        axes = figure.add_subplot()
        axes.plot(
            steps,
            values,
            color=colour(index),
            linewidth=1.4,
            marker="o" if len(steps) <= 30 else None,
            markersize=3,
        )
        positive = [v for v in values if v > 0]
        if len(positive) == len(values) and positive and max(positive) > 100 * min(positive):
            axes.set_yscale("log")
        if reference is not None:
            axes.axhline(reference[1], color="#555555", linestyle=":", linewidth=1)
            axes.annotate(
                reference[0],
                (0, reference[1]),
                xycoords=("axes fraction", "data"),
                xytext=(4, 3),
                textcoords="offset points",
                fontsize=8,
                color="#555555",
            )
        axes.set_xlabel("condensation step")
        axes.set_ylabel(ylabel)
        axes.set_title(title, loc="left")

    return render(draw, width=5.6, height=2.8)
