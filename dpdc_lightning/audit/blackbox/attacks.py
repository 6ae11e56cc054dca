"""Membership-inference attacks on a target classifier, from the φ values of reference shadows.

- Loss threshold (Yeom et al. 2018; Dong, Zhao & Lyu 2022 §5.1): φ is a decreasing function of the
  cross-entropy loss (loss = softplus(−φ)), so "loss below τ" is "φ above a threshold". The
  threshold is chosen on a calibration half (largest TPR − FPR) and the advantage reported on the
  disjoint half.
- LiRA online (Carlini et al. 2022, "Membership inference attacks from first principles", Alg. 1):
  per record, Gaussians of φ under the reference shadows that held it (IN) and that did not (OUT);
  score = log N(φ; μ_in, σ_in²) − log N(φ; μ_out, σ_out²).
- LiRA offline (same paper, §VI-C): OUT only, one-sided: score = (φ − μ_out) / σ_out.

With few shadows (S < 64) per-record variances are unreliable; like Carlini et al. for small S we
use one global variance for IN and one for OUT (pooled residuals over all records).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from dpdc_lightning.audit.metrics.roc import advantage, best_threshold, split_halves


@dataclass(frozen=True)
class ShadowStats:
    mu_in: Tensor  # per record (NaN where no shadow held it)
    mu_out: Tensor  # per record (NaN where every shadow held it)
    sigma_in: float
    sigma_out: float


def fit_gaussians(phi: Tensor, held: Tensor, *, used: Tensor | None = None) -> ShadowStats:
    """``phi`` [S, n] of the reference shadows, ``held`` [S, n] their membership; entries where
    ``used`` is False are left out of both Gaussians (e.g. to give records that no shadow held as
    many OUT values as the others have, so their means are as noisy)."""
    phi, held = phi.double(), held.bool()
    used = torch.ones_like(held) if used is None else used.bool()
    is_in, is_out = held & used, ~held & used
    n_in, n_out = is_in.sum(0), is_out.sum(0)
    mu_in = torch.where(is_in, phi, 0.0).sum(0) / n_in.clamp(min=1)
    mu_out = torch.where(is_out, phi, 0.0).sum(0) / n_out.clamp(min=1)
    mu_in[n_in == 0], mu_out[n_out == 0] = math.nan, math.nan
    res_in = (phi - mu_in)[is_in & (n_in > 1)]
    res_out = (phi - mu_out)[is_out & (n_out > 1)]
    # Pooled over records: squared residuals / sum of (count - 1), the unbiased pooled variance.
    sigma_in = _pooled_std(res_in, n_in)
    sigma_out = _pooled_std(res_out, n_out)
    return ShadowStats(mu_in.float(), mu_out.float(), sigma_in, sigma_out)


def _pooled_std(residuals: Tensor, counts: Tensor) -> float:
    usable = counts[counts > 1]
    dof = float((usable - 1).sum())
    if dof <= 0:
        # No record seen twice: a unit scale (the offline score's ranking does not depend on it).
        return 1.0
    return max(math.sqrt(float((residuals**2).sum()) / dof), 1e-3)


def lira_online(target_phi: Tensor, stats: ShadowStats) -> Tensor:
    """Log-likelihood ratio IN vs OUT (NaN where a record lacks IN or OUT shadows)."""
    phi = target_phi.double()
    log_in = _log_normal(phi, stats.mu_in.double(), stats.sigma_in)
    log_out = _log_normal(phi, stats.mu_out.double(), stats.sigma_out)
    return (log_in - log_out).float()


def lira_offline(target_phi: Tensor, stats: ShadowStats) -> Tensor:
    """How far above its OUT distribution the target's φ lies (NaN where a record has no OUT
    shadow)."""
    return ((target_phi.double() - stats.mu_out.double()) / stats.sigma_out).float()


def _log_normal(x: Tensor, mu: Tensor, sigma: float) -> Tensor:
    return -0.5 * ((x - mu) / sigma) ** 2 - math.log(sigma) - 0.5 * math.log(2 * math.pi)


def loss_threshold(target_phi: Tensor, members: Tensor, *, seed: int) -> dict[str, float]:
    """Threshold on φ chosen on a calibration half; TPR, FPR and advantage on the other half."""
    scores, truth = target_phi.double().numpy(), members.bool().numpy()
    calibrate, certify = split_halves(truth, seed=seed)
    threshold = best_threshold(scores[calibrate], truth[calibrate])
    predicted = scores[certify] >= threshold
    tpr = float(predicted[truth[certify]].mean())
    fpr = float(predicted[~truth[certify]].mean())
    return {
        "threshold_phi": threshold,
        "tpr": tpr,
        "fpr": fpr,
        "advantage": tpr - fpr,
        "advantage_all_thresholds": advantage(scores, truth),
    }


def attack_scores(target_phi: Tensor, stats: ShadowStats, *, online: bool) -> dict[str, np.ndarray]:
    """Each attack's score per record (higher = member)."""
    scores = {
        "loss_threshold": target_phi.double().numpy(),
        "lira_offline": lira_offline(target_phi, stats).double().numpy(),
    }
    if online:
        scores["lira_online"] = lira_online(target_phi, stats).double().numpy()
    return scores
