"""ROC curves as a PNG, drawn with torch only (no plotting library is a dependency).

Log-log axes from FPR/TPR 1e-3 to 1 (the low-FPR region is where membership inference matters,
Carlini et al. 2022); grid lines at each decade, the diagonal (random guessing) in grey, one colour
per curve in the order given. The legend (curve name -> colour) goes into audit.json.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torchvision.io import encode_png

COLOURS = (
    (31, 119, 180),
    (214, 39, 40),
    (44, 160, 44),
    (148, 103, 189),
    (255, 127, 14),
    (23, 190, 207),
)
COLOUR_NAMES = ("blue", "red", "green", "purple", "orange", "cyan")
SIZE, MARGIN, LOW = 320, 20, 1e-3


def _pixel(value: np.ndarray) -> np.ndarray:
    """Map a rate in [LOW, 1] (log scale) to a pixel offset in [0, SIZE - 2 MARGIN]."""
    span = SIZE - 2 * MARGIN
    return np.round(
        (np.log10(np.clip(value, LOW, 1.0)) - math.log10(LOW)) / -math.log10(LOW) * span
    ).astype(int)


def roc_png(curves: dict[str, tuple[np.ndarray, np.ndarray]]) -> tuple[bytes, dict[str, str]]:
    """PNG bytes and the legend {curve name: colour name}."""
    canvas = torch.full((3, SIZE, SIZE), 255, dtype=torch.uint8)

    def plot(x: np.ndarray, y: np.ndarray, colour: tuple[int, int, int]) -> None:
        # Dense linear interpolation in log space so the drawn line has no gaps.
        lx, ly = np.log10(np.clip(x, LOW, 1.0)), np.log10(np.clip(y, LOW, 1.0))
        t = np.linspace(0, 1, 4000)
        px = _pixel(10 ** np.interp(t * (len(lx) - 1), np.arange(len(lx)), lx))
        py = _pixel(10 ** np.interp(t * (len(ly) - 1), np.arange(len(ly)), ly))
        cols, rows = MARGIN + px, SIZE - MARGIN - py
        for dr in (0, 1):
            canvas[:, np.clip(rows + dr, 0, SIZE - 1), cols] = torch.tensor(
                colour, dtype=torch.uint8
            )[:, None]

    for decade in (1e-3, 1e-2, 1e-1, 1.0):
        p = int(_pixel(np.array([decade]))[0])
        canvas[:, MARGIN : SIZE - MARGIN + 1, MARGIN + p] = 220
        canvas[:, SIZE - MARGIN - p, MARGIN : SIZE - MARGIN + 1] = 220
    plot(np.array([LOW, 1.0]), np.array([LOW, 1.0]), (150, 150, 150))
    legend = {}
    for i, (name, (fpr, tpr)) in enumerate(curves.items()):
        keep = fpr > 0  # log axes: the (0, 0) corner is off the plot
        if keep.sum() >= 2:
            plot(fpr[keep], tpr[keep], COLOURS[i % len(COLOURS)])
        legend[name] = COLOUR_NAMES[i % len(COLOURS)]
    return bytes(encode_png(canvas).numpy()), legend
