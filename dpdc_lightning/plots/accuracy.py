"""Accuracy against ε with error bars: a sweep's members, a reproduction table's rows.

One line per setting; each point is a mean with a bar of ± one standard deviation over what the
caption names (seeds of a sweep, evaluation runs of one condensation). A setting without a
guarantee (ε = ∞) is a dashed horizontal line at its accuracy. ε on a log axis when the values
span a factor of 4 or more; the ticks are the values themselves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dpdc_lightning.plots.canvas import colour, render

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@dataclass(frozen=True)
class Point:
    """One point: ``epsilon`` None means not private; ``std`` over ``n`` values (0 for one)."""

    epsilon: float | None
    mean: float
    std: float
    n: int


def accuracy_vs_epsilon_png(
    lines: Mapping[str, Sequence[Point]], *, ylabel: str, spread_over: str
) -> bytes:
    """The figure as PNG bytes; ``lines`` maps a legend label to its points."""
    finite = sorted({p.epsilon for ps in lines.values() for p in ps if p.epsilon is not None})

    def draw(figure: Figure) -> None:
        axes = figure.add_subplot()
        for index, (label, points) in enumerate(sorted(lines.items())):
            drawn = sorted((p for p in points if p.epsilon is not None), key=lambda p: p.epsilon)
            if drawn:
                axes.errorbar(
                    [p.epsilon for p in drawn],
                    [p.mean for p in drawn],
                    yerr=[p.std for p in drawn],
                    color=colour(index),
                    marker="o",
                    markersize=4,
                    capsize=3,
                    linewidth=1.5,
                    label=label,
                )
            for p in points:
                if p.epsilon is None:
                    axes.axhline(
                        p.mean,
                        color=colour(index),
                        linestyle="--",
                        linewidth=1.5,
                        label=f"{label} (not private, ε = ∞)",
                    )
        if finite and finite[-1] >= 4 * finite[0] > 0:
            axes.set_xscale("log")
        if finite:
            axes.set_xticks(finite, [f"{x:g}" for x in finite])
            axes.minorticks_off()
        axes.set_xlabel("ε (the run's target, else its accounted ε; δ as in its privacy.json)")
        axes.set_ylabel(ylabel)
        axes.set_title(f"mean ± std over {spread_over}", loc="left")
        axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))

    return render(draw, width=7.2, height=4.8)
