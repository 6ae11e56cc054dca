"""``sweep.png``: accuracy against ε, drawn by matplotlib (:mod:`dpdc_lightning.plots.accuracy`).

One line per method (and per other swept setting); each point is the mean over the members that
differ only in ``seed``, with a bar of ± one standard deviation over them (population std, as the
tables print it). Non-private members (ε = ∞) are a dashed horizontal line.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

from dpdc_lightning.plots.accuracy import Point
from dpdc_lightning.plots.accuracy import accuracy_vs_epsilon_png as draw_accuracy


def series_of(
    rows: list[dict[str, Any]], *, model: str
) -> dict[str, dict[float | None, list[float]]]:
    """{line label: {ε (None: not private): [accuracy of each seed]}} from finished, evaluated members."""
    lines: dict[str, dict[float | None, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        accuracy = row.get("evaluation", {}).get(model, {}).get("mean")
        if row.get("status") != "ok" or accuracy is None:
            continue
        others = [
            t
            for t in row["overrides"].split()
            if t.partition("=")[0] not in ("seed", "privacy.target_epsilon", "method")
        ]
        label = " ".join([row["method"], *others])
        x = (
            row.get("target_epsilon")
            if row.get("target_epsilon") is not None
            else row.get("epsilon")
        )
        lines[label][x].append(accuracy)
    return lines


def points_of(series: dict[str, dict[float | None, list[float]]]) -> dict[str, list[Point]]:
    """Each ε's values as a point: their mean and population standard deviation."""
    return {
        label: [
            Point(x, statistics.fmean(values), statistics.pstdev(values), len(values))
            for x, values in by_epsilon.items()
        ]
        for label, by_epsilon in series.items()
    }


def accuracy_vs_epsilon_png(
    rows: list[dict[str, Any]], *, model: str, spread_over: str = "seeds"
) -> bytes | None:
    """The plot as PNG bytes, or None when no member was evaluated. ``spread_over`` names what the
    members of one point are (the caption says "mean ± std over" it)."""
    lines = series_of(rows, model=model)
    if not lines:
        return None
    return draw_accuracy(
        points_of(lines), ylabel=f"{model} test accuracy (%)", spread_over=spread_over
    )
