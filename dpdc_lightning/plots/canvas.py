"""One way to draw a figure: matplotlib on its Agg canvas, headless, same numbers -> same bytes.

Each figure is a bare :class:`matplotlib.figure.Figure` drawn under one fixed style and saved as PNG
through :class:`~matplotlib.backends.backend_agg.FigureCanvasAgg`: no pyplot (no global figure
state, no display, no backend switch in the caller's process, so a notebook keeps its own), no
metadata that varies (matplotlib writes its version as ``Software`` unless told not to; a PNG gets
no date), and the DejaVu fonts shipped inside matplotlib (the font manager lists its own fonts
before the system's and keeps the first of equal matches). matplotlib is imported here, on first
use: this package sits at the bottom of the import graph and must not slow down the commands that
draw nothing.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# matplotlib's "tab10" colours, in its order: distinguishable, and readable when printed in grey.
COLOURS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
COLOUR_NAMES = (
    "blue",
    "orange",
    "green",
    "red",
    "purple",
    "brown",
    "pink",
    "grey",
    "olive",
    "cyan",
)
DPI = 100
STYLE: dict[str, Any] = {
    "font.family": "DejaVu Sans",
    "font.size": 9,
    "mathtext.fontset": "dejavusans",
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "axes.grid": True,
    "axes.grid.which": "major",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "grid.color": "#e0e0e0",
    "grid.linewidth": 0.6,
    "legend.fontsize": 8,
    "legend.frameon": False,
    "figure.dpi": DPI,
    "savefig.dpi": DPI,
    "savefig.facecolor": "white",
    "svg.hashsalt": "dpdc_lightning",
}


def colour(index: int) -> str:
    return COLOURS[index % len(COLOURS)]


def colour_name(index: int) -> str:
    return COLOUR_NAMES[index % len(COLOUR_NAMES)]


def render(draw: Callable[[Figure], None], *, width: float, height: float) -> bytes:
    """PNG bytes of a ``width`` x ``height`` inch figure that ``draw`` fills (at :data:`DPI`)."""
    import matplotlib
    from cycler import cycler
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    style = {
        **STYLE,
        "axes.prop_cycle": cycler(color=list(COLOURS)),
    }  # cycler comes with matplotlib
    with matplotlib.rc_context(style):
        figure = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
        FigureCanvasAgg(figure)
        draw(figure)
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()
