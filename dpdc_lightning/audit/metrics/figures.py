"""The audit's figures: ROC curves of the membership attacks (drawn by :mod:`dpdc_lightning.plots`)
and the histogram of the white-box canary statistic that audit_whitebox.json keeps for its figure.

ROC curves: log–log axes down to one example's rate, FPR 0.1 % and 1 % marked with each curve's TPR
there (:func:`.metrics.tpr_at`, the rule of the audit's tables), AUC in the legend (Carlini et al.
2022). The legend (curve name -> colour name) also goes into audit.json.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpdc_lightning.audit.metrics.roc import FPR_POINTS, tpr_at
from dpdc_lightning.plots.canvas import colour_name
from dpdc_lightning.plots.roc import Curve, roc_curves_png

HISTOGRAM_BINS = 40


def roc_png(curves: dict[str, tuple[np.ndarray, np.ndarray]]) -> tuple[bytes, dict[str, str]]:
    """PNG bytes and the legend {curve name: colour name} of ``{name: (fpr, tpr)}``."""
    from sklearn.metrics import auc

    drawn = {
        name: Curve(
            fpr=np.asarray(fpr),
            tpr=np.asarray(tpr),
            auc=float(auc(fpr, tpr)),
            tpr_at={rate: tpr_at(np.asarray(fpr), np.asarray(tpr), rate) for rate in FPR_POINTS},
        )
        for name, (fpr, tpr) in curves.items()
    }
    legend = {name: colour_name(index) for index, name in enumerate(curves)}
    return roc_curves_png(drawn, title="membership inference (log–log)"), legend


def score_histogram(
    scores: np.ndarray, members: np.ndarray, *, threshold: float, bins: int = HISTOGRAM_BINS
) -> dict[str, Any]:
    """Counts of the canary statistic for present and absent canaries on shared bins, for the
    figure of the white-box audit. The bins span the 0.5th to 99.5th percentile of all scores and
    the threshold; scores outside are counted in the end bins (``clipped`` says how many)."""
    scores = np.asarray(scores, dtype=np.float64).ravel()
    members = np.asarray(members).ravel().astype(bool)
    finite = np.isfinite(scores)
    values = scores[finite]
    low, high = np.percentile(values, [0.5, 99.5]) if len(values) else (0.0, 1.0)
    if np.isfinite(threshold):
        low, high = min(low, threshold), max(high, threshold)
    if high <= low:
        low, high = low - 0.5, high + 0.5
    edges = np.linspace(low, high, bins + 1)
    clipped = np.clip(values, low, high)
    return {
        "edges": edges.tolist(),
        "present": np.histogram(clipped[members[finite]], edges)[0].tolist(),
        "absent": np.histogram(clipped[~members[finite]], edges)[0].tolist(),
        "threshold": float(threshold),
        "clipped": int(((values < low) | (values > high)).sum()),
        "non_finite": int((~finite).sum()),
    }
