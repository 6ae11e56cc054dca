"""Membership-inference ROC curves on log–log axes, as Carlini et al. 2022 ("Membership Inference
Attacks From First Principles", Fig. 1 and §3) draw them: what matters is the true-positive rate at
a LOW false-positive rate, which a linear plot (and the AUC) hides.

The axes run from the smallest rate the data can show (one example) to 1; the diagonal is random
guessing; dotted verticals mark FPR 0.1 % and 1 %, and each curve's TPR there (given by the caller,
who owns the rule that reads it off the curve) is a marker and a number in the legend.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from dpdc_lightning.plots.canvas import colour, render

if TYPE_CHECKING:
    from matplotlib.figure import Figure

MARKED_FPR = (0.001, 0.01)


@dataclass(frozen=True)
class Curve:
    """One ROC curve: rates at every threshold, its AUC, and {FPR: TPR} at the marked FPRs."""

    fpr: np.ndarray
    tpr: np.ndarray
    auc: float
    tpr_at: dict[float, float] = field(default_factory=dict)


def _percent(rate: float) -> str:
    return f"{100 * rate:.3g} %"


def roc_curves_png(curves: Mapping[str, Curve], *, title: str = "") -> bytes:
    """The curves in the order given (colours follow :data:`~.canvas.COLOURS`) as PNG bytes."""
    positive = [float(c.fpr[c.fpr > 0].min()) for c in curves.values() if (c.fpr > 0).any()]
    low = 10.0 ** math.floor(math.log10(min([*positive, MARKED_FPR[0]])))

    def draw(figure: Figure) -> None:
        axes = figure.add_subplot()
        axes.loglog(
            [low, 1], [low, 1], color="#999999", linestyle="--", linewidth=1, label="chance"
        )
        for rate in MARKED_FPR:
            axes.axvline(rate, color="#555555", linestyle=":", linewidth=0.8)
        for index, (name, curve) in enumerate(curves.items()):
            # Log axes: the (0, 0) corner is off the plot, and a zero TPR sits on the bottom edge.
            keep = curve.fpr > 0
            marks = ", ".join(
                f"TPR {_percent(t)} at {_percent(f)}" for f, t in curve.tpr_at.items()
            )
            axes.plot(
                curve.fpr[keep],
                np.maximum(curve.tpr[keep], low),
                color=colour(index),
                linewidth=1.4,
                drawstyle="steps-post",
                label=f"{name}: AUC {curve.auc:.3f}" + (f"; {marks}" if marks else ""),
            )
            for rate, tpr in curve.tpr_at.items():
                axes.plot([rate], [max(tpr, low)], marker="o", markersize=4, color=colour(index))
        axes.set_xlim(low, 1)
        axes.set_ylim(low, 1.05)
        axes.set_xlabel("false-positive rate")
        axes.set_ylabel("true-positive rate")
        axes.set_aspect("equal")
        if title:
            axes.set_title(title, loc="left")
        axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncols=1)

    return render(draw, width=5.6, height=5.2 + 0.2 * len(curves))
