"""The RDP of a private hyperparameter selection: run K ~ law trials, release only the best.

Papernot & Steinke, "Hyperparameter Tuning with Rényi Differential Privacy" (ICLR 2022,
arXiv:2110.03620). If one trial Q is (λ, ε(λ))-RDP at every order λ of a list, the selection A
(K ~ law independent of the data, run Q K times, release only the best output) is (λ, ε'(λ))-RDP:

- Theorem 2, K truncated negative binomial with shape η and parameter γ (geometric η = 1,
  logarithmic η = 0), for every λ > 1 and every λ̂ ≥ 1 of the list:
  ε'(λ) = ε(λ) + (1 + η)(1 − 1/λ̂) ε(λ̂) + (1 + η) log(1/γ) / λ̂ + log(E[K]) / (λ − 1);
  we take the best λ̂ of the list (the same for every λ), then use that RDP grows with the order:
  ε'(λ) ≤ ε'(λ₂) for any λ₂ ≥ λ of the list, so each order gets the least value at or above it.
- Theorem 6, K ~ Poisson(μ), for every λ > 1: ε'(λ) = ε(λ) + μ δ̂ + log(μ) / (λ − 1), where Q
  is (ε̂, δ̂)-DP at ε̂ = log(1 + 1/(λ − 1)); δ̂ is converted from Q's RDP curve with Canonne,
  Kamath & Steinke 2020 (arXiv:2004.00010, Prop. 12) and the KL bound δ ≤ sqrt(1 − e^(−ε(λ))),
  the best over the list.

These are the conventions of dp-accounting's ``RepeatAndSelectDpEvent`` (its RDP accountant), which
this module equals to float rounding at the same orders
(tests/selection/test_selection_accounting.py).
An order ≤ 1 gets +∞ (neither theorem applies). ε' converts to (ε, δ) with the project's own
conversion (privacy/accounting/analysis.py), so a selection's ε is comparable to every other ε it
prints.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import numpy as np
from opacus.accountants.analysis import rdp as opacus_rdp

from dpdc_lightning.errors import UserError
from dpdc_lightning.privacy.accounting.analysis import (
    RDP_ORDERS,
    check_delta,
    check_history,
    quiet_opacus,
    rdp_vector,
)
from dpdc_lightning.privacy.selection.trial_law import TrialLaw

Events = Sequence[Sequence[float]]  # one member's (noise_multiplier, sample_rate, steps) events


def _curve(orders: Sequence[float], rdp: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    orders_array = np.asarray(orders, dtype=np.float64)
    rdp_array = np.asarray(rdp, dtype=np.float64)
    if orders_array.ndim != 1 or orders_array.shape != rdp_array.shape or not len(orders_array):
        raise UserError(
            f"orders and trial_rdp must be two lists of one length, got {orders_array.shape} "
            f"and {rdp_array.shape}"
        )
    if not np.all(orders_array >= 1) or not np.all(rdp_array >= 0):
        raise UserError("RDP orders must be >= 1 and RDP values >= 0 (NaN is neither)")
    return orders_array, rdp_array


def _approximate_delta(orders: np.ndarray, rdp: np.ndarray, epsilon: float) -> float:
    """δ at ``epsilon`` of an RDP curve: the least, over the orders, of the KL bound
    sqrt(1 − e^(−r)) and, for α > 1.01 (the bound is unstable nearer 1), Prop. 12 of Canonne,
    Kamath & Steinke 2020: δ = exp((α − 1)(r − ε + log(1 − 1/α)) − log α). Capped at 1."""
    best = math.inf  # log δ
    for alpha, r in zip(orders.tolist(), rdp.tolist(), strict=True):
        log_delta = 0.5 * math.log1p(-math.exp(-r)) if r > 0 else -math.inf
        if alpha > 1.01:
            bound = (alpha - 1) * (r - epsilon + math.log1p(-1 / alpha)) - math.log(alpha)
            log_delta = min(log_delta, bound)
        best = min(best, log_delta)
    return min(math.exp(best), 1.0)


def repeat_select_rdp(
    *, orders: Sequence[float], trial_rdp: Sequence[float], law: TrialLaw
) -> np.ndarray:
    """RDP at ``orders`` of running K ~ ``law`` trials (each with RDP ``trial_rdp`` at
    ``orders``) and releasing only the best (Theorem 2, or Theorem 6 for Poisson: module doc)."""
    orders_array, rdp = _curve(orders, trial_rdp)
    above_one = orders_array > 1
    log_mean_term = np.full_like(orders_array, math.inf)
    log_mean_term[above_one] = math.log(law.mean) / (orders_array[above_one] - 1)
    if law.distribution == "poisson":
        out = np.full_like(orders_array, math.inf)
        for i in np.flatnonzero(above_one):
            epsilon_hat = math.log1p(1 / (orders_array[i] - 1))
            delta_hat = _approximate_delta(orders_array, rdp, epsilon_hat)
            out[i] = rdp[i] + law.mean * delta_hat + log_mean_term[i]
        return out
    shape, log_inverse_gamma = law.shape(), -math.log(law.gamma())
    # the λ̂ term of Theorem 2 at its best order of the list (λ̂ = 1 allowed: (1 − 1/λ̂) ε(λ̂) = 0)
    hat_terms = (1 - 1 / orders_array) * rdp + log_inverse_gamma / orders_array
    out = rdp + log_mean_term + (1 + shape) * float(np.min(hat_terms))
    # RDP is non-decreasing in the order: any higher order's bound holds at a lower one
    ranked = np.argsort(orders_array, kind="stable")
    running = np.minimum.accumulate(out[ranked][::-1])[::-1]
    monotone = np.empty_like(out)
    monotone[ranked] = running
    # equal orders take the least bound among them
    for value in np.unique(orders_array):
        same = orders_array == value
        monotone[same] = np.min(monotone[same])
    return monotone


def epsilon_at(*, orders: Sequence[float], rdp: Sequence[float], delta: float) -> float:
    """(ε, δ) of an RDP curve with the project's conversion (Opacus' ``get_privacy_spent``,
    Balle et al. 2020, as :func:`~dpdc_lightning.privacy.accounting.analysis.epsilon_from_rdp`)."""
    delta = check_delta(delta)
    orders_array, rdp_array = _curve(orders, rdp)
    if not np.any(rdp_array):
        return 0.0
    with quiet_opacus(), np.errstate(invalid="ignore"):
        epsilon, _ = opacus_rdp.get_privacy_spent(
            orders=orders_array.tolist(), rdp=rdp_array, delta=delta
        )
    return float(epsilon)


def selection_epsilon(
    *, orders: Sequence[float], trial_rdp: Sequence[float], law: TrialLaw, delta: float
) -> float:
    """ε at ``delta`` of the selection: :func:`repeat_select_rdp`, converted as the project's
    accountant converts (Balle et al. 2020) over the same orders."""
    rdp = repeat_select_rdp(orders=orders, trial_rdp=trial_rdp, law=law)
    return epsilon_at(orders=orders, rdp=rdp, delta=delta)


def history_rdp(history: Events, *, orders: Sequence[float]) -> np.ndarray:
    """RDP at ``orders`` of composed Poisson-subsampled Gaussian events (Opacus' analysis);
    at the project's orders exactly the accountant's :func:`rdp_vector`."""
    entries = check_history(history)
    if tuple(float(a) for a in orders) == RDP_ORDERS:
        return rdp_vector(entries)
    total = np.zeros(len(orders), dtype=np.float64)
    for sigma, q, steps in entries:
        unit = opacus_rdp.compute_rdp(q=q, noise_multiplier=sigma, steps=1, orders=list(orders))
        total = total + np.asarray(unit, dtype=np.float64) * steps
    return total


def score_rdp(*, orders: Sequence[float], score_noise_multiplier: float | None) -> np.ndarray:
    """RDP of the score: a count of sensitivity 1 plus N(0, σ²) noise is (α, α / (2σ²))-RDP
    (Mironov 2017, Prop. 7); None (a public validation set) costs nothing."""
    orders_array = np.asarray(orders, dtype=np.float64)
    if score_noise_multiplier is None:
        return np.zeros_like(orders_array)
    sigma = score_noise_multiplier
    if isinstance(sigma, bool) or not isinstance(sigma, numbers.Real) or not 0 < sigma < math.inf:
        raise UserError(
            f"select: the score's noise multiplier must be a finite number > 0, got {sigma!r}"
        )
    return orders_array / (2.0 * float(sigma) ** 2)


def trial_rdp(
    *,
    orders: Sequence[float],
    members: Sequence[Events],
    score_noise_multiplier: float | None,
) -> np.ndarray:
    """RDP at ``orders`` of ONE trial: run a grid member drawn uniformly (public randomness), then
    release its score.

    The member: a mixture, with data-independent weights, of the members' output laws. For λ > 1,
    (p, q) -> p^λ q^(1−λ) is jointly convex (the perspective of x^λ), so the mixture's
    ∫ p^λ q^(1−λ) is at most the weighted mean of the members', hence at most the largest: at each
    order the mixture's divergence is at most the largest member's (Rényi divergence is jointly
    quasi-convex; van Erven & Harremoës, IEEE Trans. Inf. Theory 2014). Each member: its events
    composed.
    The score is COMPOSED with it (added): the conservative choice, which needs no argument about
    how the validation split and the training records share a neighbouring record.
    """
    if not members:
        raise UserError("select: the grid has no member; give at least one setting")
    curves = [history_rdp(member, orders=orders) for member in members]
    return np.max(np.stack(curves), axis=0) + score_rdp(
        orders=orders, score_noise_multiplier=score_noise_multiplier
    )


def composed_rdp(
    *, orders: Sequence[float], members: Sequence[Events], score_noise_multiplier: float | None
) -> np.ndarray:
    """RDP of the alternative: every member run once and released with its score, composed."""
    total = np.zeros(len(orders), dtype=np.float64)
    for member in members:
        total = total + trial_rdp(
            orders=orders, members=[member], score_noise_multiplier=score_noise_multiplier
        )
    return total
