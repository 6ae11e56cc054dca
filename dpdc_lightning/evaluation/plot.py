"""``sweep.png``: accuracy against ε, drawn with PIL (no plotting library needed).

One line per method (and per other swept setting); each point is the mean over the members that
differ only in ``seed``, with a bar of ± one standard deviation over them. Non-private members
(ε = ∞) are drawn as a dashed horizontal line.
"""

from __future__ import annotations

import io
import math
import statistics
from collections import defaultdict
from typing import Any

WIDTH, HEIGHT, LEFT, RIGHT, TOP, BOTTOM = 720, 480, 70, 190, 40, 60
COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]


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


def accuracy_vs_epsilon_png(
    rows: list[dict[str, Any]], *, model: str, spread_over: str = "seeds"
) -> bytes | None:
    """The plot as PNG bytes, or None when no member was evaluated. ``spread_over`` names what the
    members of one point are (the caption says "mean +- std over" it)."""
    from PIL import Image, ImageDraw

    lines = series_of(rows, model=model)
    if not lines:
        return None
    xs = sorted({x for points in lines.values() for x in points if x is not None})
    ys = [a for points in lines.values() for values in points.values() for a in values]
    spread = [statistics.pstdev(v) for points in lines.values() for v in points.values()]
    y_low = max(0.0, math.floor((min(ys) - max(spread + [0])) / 10) * 10)
    y_high = min(100.0, math.ceil((max(ys) + max(spread + [0])) / 10) * 10)
    if y_high <= y_low:
        y_high = y_low + 10
    log_x = bool(xs) and xs[0] > 0 and xs[-1] / xs[0] >= 4
    fx = (lambda v: math.log10(v)) if log_x else (lambda v: v)
    x_low, x_high = (fx(xs[0]), fx(xs[-1])) if xs else (0.0, 1.0)
    if x_high <= x_low:
        x_low, x_high = x_low - 0.5, x_high + 0.5
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(x: float) -> float:
        return LEFT + (fx(x) - x_low) / (x_high - x_low) * plot_w * 0.9 + plot_w * 0.05

    def py(y: float) -> float:
        return TOP + (1 - (y - y_low) / (y_high - y_low)) * plot_h

    image = Image.new("RGB", (WIDTH, HEIGHT), "white")
    draw = ImageDraw.Draw(image)
    draw.rectangle([LEFT, TOP, LEFT + plot_w, TOP + plot_h], outline="black")
    for k in range(6):
        y = y_low + (y_high - y_low) * k / 5
        draw.line([LEFT - 4, py(y), LEFT, py(y)], fill="black")
        draw.text((LEFT - 40, py(y) - 6), f"{y:.0f}", fill="black")
    for x in xs:
        draw.line([px(x), TOP + plot_h, px(x), TOP + plot_h + 4], fill="black")
        draw.text((px(x) - 8, TOP + plot_h + 8), f"{x:g}", fill="black")
    draw.text(
        (LEFT + plot_w // 2 - 60, HEIGHT - 28),
        "epsilon" + (" (log scale)" if log_x else ""),
        fill="black",
    )
    draw.text(
        (8, TOP - 28), f"{model} test accuracy (%), mean +- std over {spread_over}", fill="black"
    )
    for index, (label, points) in enumerate(sorted(lines.items())):
        colour = COLOURS[index % len(COLOURS)]
        finite = sorted((x, v) for x, v in points.items() if x is not None)
        coords = [(px(x), py(statistics.fmean(v))) for x, v in finite]
        if len(coords) > 1:
            draw.line(coords, fill=colour, width=2)
        for (_x, v), (cx, cy) in zip(finite, coords):
            sd = statistics.pstdev(v)
            draw.line(
                [cx, py(statistics.fmean(v) + sd), cx, py(statistics.fmean(v) - sd)],
                fill=colour,
                width=1,
            )
            draw.ellipse([cx - 3, cy - 3, cx + 3, cy + 3], fill=colour)
        if None in points:  # not private: a dashed line at its accuracy
            y = py(statistics.fmean(points[None]))
            for start in range(LEFT, LEFT + plot_w, 12):
                draw.line([start, y, min(start + 6, LEFT + plot_w), y], fill=colour, width=2)
            label += " (not private)"
        legend_y = TOP + 16 * index
        draw.line(
            [LEFT + plot_w + 10, legend_y + 6, LEFT + plot_w + 30, legend_y + 6],
            fill=colour,
            width=3,
        )
        draw.text((LEFT + plot_w + 34, legend_y), label[:26], fill="black")
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return buffer.getvalue()
