"""ε of a history by an accountant that is not ours: Google's dp-accounting (RDP and PLD).

Our accountant (privacy/accounting/analysis.py) wraps Opacus. ``dpdc-privacy verify`` recomputes
every ε a bundle records with it and with dp-accounting: Google's maintained successor of TensorFlow
Privacy's RDP accountant (from which Opacus' RDP code was once ported; the two have been kept
apart since) and a PLD accountant, a different method altogether. A history is Opacus' list of
``(noise_multiplier, sample_rate, steps)``; each entry is ``steps`` runs of the Poisson-subsampled
Gaussian mechanism (add/remove one record): dp-accounting's
``PoissonSampledDpEvent(q, GaussianDpEvent(σ))``.

RDP (:func:`rdp_epsilon`). Both libraries convert RDP to (ε, δ) with the same bound: Balle et al.
2020 (arXiv:1905.09982, Thm 21), which dp-accounting cites as Canonne, Kamath & Steinke 2020
(arXiv:2004.00010, Prop 12): ε = min_α r(α) + log(1 − 1/α) − log(δ α) / (α − 1). dp-accounting
also returns ε = 0 when δ ≥ sqrt(1 − exp(−r)) (a KL bound, for tiny RDP); Opacus does not. The RDP
of the sampled Gaussian is the series of Mironov, Talwar & Zhang 2019 (arXiv:1908.10530, Sec 3.3):

- at an integer order both libraries sum the same finite binomial expansion in log space: they
  agree to float rounding (≤ 2e-11 of max(1, ε) over q ∈ [1e-4, 1], σ ∈ [0.3, 50], 1 to 1e5
  steps, δ ∈ [1e-6, 1e-3]);
- at a fractional order dp-accounting 0.6 adds the terms of the infinite series in absolute value
  where Opacus adds them with their signs: dp-accounting's value is an upper bound (Opacus' matches
  numerical integration to 1e-9), up to 15 % above at orders near 1. Its ε is therefore ≥ ours:
  by 3e-5 relative on the DPDC reference rows, by a factor 3 at ε > 1000.

So the check compares ε at the integer orders of Opacus' list (:func:`integer_order_epsilons`),
where the two compute the same quantity, to :data:`TOLERANCE`; at all orders, ours must not exceed
dp-accounting's upper bound.

PLD (:func:`pld_bounds`). Privacy loss distributions (Koskela et al. 2020; Doroshenko et al.
2022, "Connect the dots") are tighter than RDP. The pessimistic estimate (connect-the-dots) is an
upper bound on the true ε of the history, the optimistic one (privacy buckets) a lower bound; the
gap is their discretisation error, which grows with the number of compositions. An ε a bundle
states is a valid bound only if it is ≥ the true ε, hence ≥ the lower bound: that is the check. A
stated ε ≥ the upper bound is proved valid by dp-accounting alone.
"""

from __future__ import annotations

import functools
import logging
import math

import numpy as np

from dpdc_lightning.privacy.accounting.analysis import (
    RDP_ORDERS,
    History,
    check_history,
    quiet_opacus,
    rdp_vector,
)

# Agreement of two float computations of the same quantity, relative to max(1, ε): 50 times the
# largest difference measured (2e-11, see above), 1e5 times below the 4 decimals ε is printed with.
TOLERANCE = 1e-9
# PLD grids in privacy-loss units. The upper bound (connect-the-dots) on a 1e-3 grid is 5.0114 at
# the DPDC default (q = 50/6000, σ = 1, 10000 steps), 0.004 above the one on a 10 times finer grid;
# a PLD builds in ~0.1 s. The lower bound (privacy buckets) loses up to half a grid step per
# composition (5.0077 - 4.5077 = 10000 x 1e-4 / 2 measured), so its grid shrinks with the steps, to
# 1e-4 at most (~1 s a PLD at σ = 1): within 0.1 / 2 of the true ε up to 1000 steps.
PLD_INTERVAL = 1e-3
PLD_LOWER_LOSS = 0.1  # the most the lower bound's grid may cost, summed over the steps
PLD_FINEST = 1e-4
# A Gaussian PLD (sensitivity 1, std σ) spans privacy losses over about (1 + 20σ)/σ², its tails
# beyond ~10σ truncated: at σ = 1e-9 that is 1e21 grid points, a PLD no memory holds (a vacuous
# run hung building it). Above this many points of one step, or at a vacuous ε, no PLD is built.
PLD_MAX_POINTS = 10_000_000
_INTEGER = np.array([float(a).is_integer() for a in RDP_ORDERS])
_ALL = np.ones(len(RDP_ORDERS), dtype=bool)
INTEGER_ORDERS: tuple[float, ...] = tuple(np.asarray(RDP_ORDERS)[_INTEGER].tolist())


def _quiet() -> None:
    # dp-accounting logs through absl (warnings about orders it skips); verify prints its own table.
    logging.getLogger("absl").setLevel(logging.ERROR)


@functools.lru_cache(maxsize=1024)
def _unit_rdp(noise_multiplier: float, sample_rate: float) -> np.ndarray:
    """dp-accounting's RDP of one run of the sampled Gaussian at Opacus' orders (it multiplies
    this by the count of a self-composed event, as we do with the steps)."""
    from dp_accounting import dp_event
    from dp_accounting.rdp import rdp_privacy_accountant

    _quiet()
    accountant = rdp_privacy_accountant.RdpAccountant(orders=list(RDP_ORDERS))
    gaussian = dp_event.GaussianDpEvent(noise_multiplier)
    accountant.compose(dp_event.PoissonSampledDpEvent(sample_rate, gaussian))
    curve = accountant.rdp
    curve.setflags(write=False)
    return curve


def _rdp_curve(history: History) -> np.ndarray:
    total = np.zeros(len(RDP_ORDERS))
    for sigma, q, steps in check_history(history):
        total = total + _unit_rdp(sigma, q) * steps
    return total


def _dp_epsilon(curve: np.ndarray, mask: np.ndarray, *, delta: float) -> float:
    from dp_accounting.rdp import rdp_privacy_accountant

    if not np.any(curve):
        return 0.0
    orders = np.asarray(RDP_ORDERS)[mask]
    return float(rdp_privacy_accountant.compute_epsilon(orders, curve[mask], delta)[0])


def rdp_epsilon(history: History, *, delta: float) -> float:
    """dp-accounting's RDP ε of ``history`` at ``delta`` over Opacus' orders."""
    return _dp_epsilon(_rdp_curve(history), _ALL, delta=delta)


def integer_order_epsilons(history: History, *, delta: float) -> tuple[float, float]:
    """(ours, dp-accounting's) RDP ε of ``history`` at the integer orders of Opacus' list only."""
    from opacus.accountants.analysis import rdp as opacus_rdp

    if not check_history(history):
        return 0.0, 0.0
    with quiet_opacus():  # its "optimal order is the smallest alpha" on a vacuous ε: harmless
        ours, _ = opacus_rdp.get_privacy_spent(
            orders=list(INTEGER_ORDERS), rdp=rdp_vector(history)[_INTEGER], delta=delta
        )
    return max(0.0, float(ours)), _dp_epsilon(_rdp_curve(history), _INTEGER, delta=delta)


@functools.lru_cache(maxsize=256)
def _pld(noise_multiplier: float, sample_rate: float, steps: int, interval: float, upper: bool):
    from dp_accounting.pld import privacy_loss_distribution as pld

    _quiet()
    return pld.from_gaussian_mechanism(
        standard_deviation=noise_multiplier,
        sampling_prob=sample_rate,
        pessimistic_estimate=upper,
        use_connect_dots=upper,  # connect-the-dots has no optimistic variant
        value_discretization_interval=interval,
    ).self_compose(steps)


def pld_skipped(history: History, *, delta: float, epsilon: float) -> str | None:
    """Why dp-accounting's PLD is not built for ``history`` (None: it is): a vacuous ``epsilon``
    (at least ln(1/δ), where no bound is worth proving and the composed PLD spans the huge losses),
    or a step whose PLD would exceed :data:`PLD_MAX_POINTS` on the finest grid."""
    if epsilon >= math.log(1 / delta):
        return (
            f"no PLD: ε >= ln(1/δ) = {math.log(1 / delta):.3g}, a guarantee that promises nothing"
        )
    for sigma, _, _ in check_history(history):
        if (1 + 20 * sigma) / (sigma * sigma * PLD_FINEST) > PLD_MAX_POINTS:
            return f"no PLD: σ = {sigma:g} is too small for a PLD grid in memory"
    return None


def pld_bounds(history: History, *, delta: float) -> tuple[float, float]:
    """(lower, upper) bounds on the true ε of ``history`` at ``delta`` from dp-accounting's PLD."""
    entries = check_history(history)
    if not entries:
        return 0.0, 0.0
    steps = sum(entry[2] for entry in entries)
    lower_grid = min(PLD_INTERVAL, max(PLD_FINEST, PLD_LOWER_LOSS / steps))
    bounds = []
    for interval, upper in ((lower_grid, False), (PLD_INTERVAL, True)):
        composed = None
        for sigma, q, runs in entries:
            one = _pld(sigma, q, runs, interval, upper)
            composed = one if composed is None else composed.compose(one)
        epsilon = float(composed.get_epsilon_for_delta(delta))
        bounds.append(max(0.0, epsilon) if math.isfinite(epsilon) else math.inf)
    return bounds[0], bounds[1]


def agree(a: float, b: float) -> bool:
    """Two computations of the same ε agree: within :data:`TOLERANCE` of max(1, ε)."""
    return abs(a - b) <= TOLERANCE * max(1.0, abs(a), abs(b))


def at_most(a: float, b: float) -> bool:
    """``a`` ≤ ``b`` up to :data:`TOLERANCE` (a float computation may land just above)."""
    return a <= b + TOLERANCE * max(1.0, abs(b))
