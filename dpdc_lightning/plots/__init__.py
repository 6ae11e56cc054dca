"""Every figure of the package, drawn by matplotlib (Agg, headless, byte-reproducible): pure
functions from numbers to PNG bytes, importing nothing above them.

- ``canvas.py``: the one way to draw (style, colours, deterministic PNG);
- ``accuracy.py``: accuracy against ε with error bars (sweeps, reproduction tables);
- ``roc.py``: membership-inference ROC curves on log–log axes, TPR at 0.1 % and 1 % FPR marked;
- ``distribution.py``: the white-box audit's canary statistic, present vs absent, and threshold;
- ``curves.py``: ε and loss against the condensation step.

The synthetic-image grid (``engine/image_grid.py``) is pixels, not a plot: PIL draws it.
"""
