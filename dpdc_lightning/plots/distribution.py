"""The white-box audit's evidence: the canary statistic of present and absent canaries, the
threshold chosen on the calibration trials, and the ε lower bound those counts certify (Nasr et
al. 2023, "Tight auditing of differentially private machine learning", draw the same two
histograms).

Each histogram is normalised to fractions of its own canaries (present and absent canaries are not
equally many); the share of each side beyond the threshold is what the bound is computed from.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from dpdc_lightning.plots.canvas import colour, render

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def canary_distribution_png(
    *,
    edges: Sequence[float],
    present: Sequence[int],
    absent: Sequence[int],
    threshold: float,
    statistic: str,
    caption: str,
) -> bytes:
    """Step histograms (fractions) of ``present`` and ``absent`` counts on ``edges``, a vertical
    line at ``threshold``; ``caption`` (the certified bound) goes under the title."""
    edges = np.asarray(edges, dtype=np.float64)

    def draw(figure: Figure) -> None:
        axes = figure.add_subplot()
        for index, (label, counts) in enumerate(
            (("canary present", present), ("canary absent", absent))
        ):
            counts = np.asarray(counts, dtype=np.float64)
            share = counts / max(counts.sum(), 1.0)
            axes.stairs(share, edges, color=colour(index), fill=True, alpha=0.35)
            axes.stairs(
                share,
                edges,
                color=colour(index),
                linewidth=1.4,
                label=f"{label} ({int(counts.sum())})",
            )
        axes.axvline(threshold, color="#222222", linestyle="--", linewidth=1.2, label="threshold")
        axes.set_xlabel(f"canary statistic ({statistic}; higher = more likely present)")
        axes.set_ylabel("fraction of canaries")
        axes.set_title(caption, loc="left")
        axes.legend(loc="upper right")

    return render(draw, width=7.2, height=3.6)
