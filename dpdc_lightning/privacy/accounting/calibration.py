"""Budget calibration: the noise multiplier for a target ε, or the number of steps a noise allows.

Both answers are checked with :mod:`.analysis` before they are returned, so a calibrated run
never exceeds its target ε (docs/privacy.md). Every argument is validated first, before any
computation, so callers can check a budget before loading data.
"""

from __future__ import annotations

import math
import numbers

from opacus.accountants import utils as opacus_utils

from dpdc_lightning.errors import UserError
from dpdc_lightning.privacy.accounting.analysis import (
    History,
    check_accountant,
    check_delta,
    check_history,
    drop_opacus_root_handler,
    epsilon_from_history,
    merge_step,
    quiet_opacus,
    rdp_epsilon_floor,
)

drop_opacus_root_handler()  # Opacus' import above configures the root logger

# Relative increase per verification retry; Opacus' answer already meets the target in practice.
_SIGMA_NUDGE = 1.001
_MAX_NUDGES = 2_000


def _check_positive(value: float, *, name: str) -> float:
    value = float(value)
    if not (math.isfinite(value) and value > 0):
        raise UserError(f"{name} must be a finite number > 0, got {value!r}")
    return value


def _check_sample_rate(sample_rate: float) -> float:
    sample_rate = float(sample_rate)
    if not (0.0 < sample_rate <= 1.0):
        raise UserError(f"sample_rate must be in (0, 1], got {sample_rate!r}")
    return sample_rate


def _check_count(value: int, *, name: str) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or int(value) != value
        or value < 1
    ):
        raise UserError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


def calibrate_noise_multiplier(
    *,
    target_epsilon: float,
    delta: float,
    sample_rate: float,
    steps: int,
    accountant: str = "rdp",
    epsilon_tolerance: float = 0.01,
    prior_history: History = (),
) -> float:
    """Noise multiplier σ for which ``steps`` runs at ``sample_rate`` cost ε ≤ ``target_epsilon``.

    Wraps Opacus' ``get_noise_multiplier`` (bisection to within ``epsilon_tolerance`` below the
    target), then verifies σ with :func:`epsilon_from_history` and raises it slightly until the
    target holds. With a ``prior_history`` (an earlier phase, e.g. noisy class sizes) the total of
    both is what must stay within the target; Opacus cannot take a prior, so σ is then found by
    bisection here. Raises :class:`UserError` for an unreachable target.
    """
    target_epsilon = _check_positive(target_epsilon, name="target_epsilon")
    delta = check_delta(delta)
    sample_rate = _check_sample_rate(sample_rate)
    steps = _check_count(steps, name="steps")
    accountant = check_accountant(accountant)
    epsilon_tolerance = _check_positive(epsilon_tolerance, name="epsilon_tolerance")

    unreachable = (
        f"target epsilon {target_epsilon:g} is unreachable with sample rate {sample_rate:g} over "
        f"{steps} steps at delta {delta:g}"
    )
    prior = check_history(prior_history)
    if prior:
        return _calibrate_after(
            prior,
            target_epsilon=target_epsilon,
            delta=delta,
            sample_rate=sample_rate,
            steps=steps,
            accountant=accountant,
            unreachable=unreachable,
        )
    sigma = _opacus_sigma(
        target_epsilon=target_epsilon,
        delta=delta,
        sample_rate=sample_rate,
        steps=steps,
        accountant=accountant,
        epsilon_tolerance=epsilon_tolerance,
        unreachable=unreachable,
    )
    for _ in range(_MAX_NUDGES):  # verified with our own analysis, raised slightly until it holds
        history = [(sigma, sample_rate, steps)]
        if epsilon_from_history(history, delta=delta, accountant=accountant) <= target_epsilon:
            return sigma
        sigma *= _SIGMA_NUDGE
    raise UserError(f"{unreachable} (would need noise multiplier > {sigma:g})")


def _opacus_sigma(
    *,
    target_epsilon: float,
    delta: float,
    sample_rate: float,
    steps: int,
    accountant: str,
    epsilon_tolerance: float,
    unreachable: str,
) -> float:
    """Opacus' ``get_noise_multiplier`` (bisection to within ``epsilon_tolerance`` below the
    target), its failures as one-line errors."""
    if accountant == "rdp":
        # Answer at once rather than after Opacus doubles sigma up to its limit, which can take
        # minutes for large sample rates.
        floor = rdp_epsilon_floor(delta=delta)
        if target_epsilon <= floor:
            raise UserError(
                f"{unreachable} (the rdp bound is above {floor:.4g} for any noise multiplier)"
            )
    try:
        with quiet_opacus():
            return float(
                opacus_utils.get_noise_multiplier(
                    target_epsilon=target_epsilon,
                    target_delta=delta,
                    sample_rate=sample_rate,
                    steps=steps,
                    accountant=accountant,
                    epsilon_tolerance=epsilon_tolerance,
                )
            )
    except ValueError as error:
        raise UserError(
            f"{unreachable} (would need noise multiplier > {opacus_utils.MAX_SIGMA:g})"
        ) from error
    except MemoryError as error:
        raise UserError(
            f"the {accountant} accountant cannot discretise this budget (too little noise); "
            "use accountant=rdp"
        ) from error


def _calibrate_after(
    prior: list,
    *,
    target_epsilon: float,
    delta: float,
    sample_rate: float,
    steps: int,
    accountant: str,
    unreachable: str,
) -> float:
    """Smallest σ (to a relative 1e-6) with ε(prior + steps runs at σ) ≤ target; never above it."""

    def fits(sigma: float) -> bool:
        history = merge_step(prior, noise_multiplier=sigma, sample_rate=sample_rate, steps=steps)
        return epsilon_from_history(history, delta=delta, accountant=accountant) <= target_epsilon

    low, high = 0.0, 1.0
    while not fits(high):
        low, high = high, 2.0 * high
        if high > opacus_utils.MAX_SIGMA:
            raise UserError(
                f"{unreachable} after the earlier phase (would need noise multiplier > "
                f"{opacus_utils.MAX_SIGMA:g})"
            )
    while high - low > 1e-6 * high:  # invariant: fits(high)
        middle = 0.5 * (low + high)
        low, high = (low, middle) if fits(middle) else (middle, high)
    return high


def max_steps(
    *,
    target_epsilon: float,
    delta: float,
    sample_rate: float,
    noise_multiplier: float,
    accountant: str = "rdp",
    prior_history: History = (),
    limit: int = 10_000_000,
) -> int:
    """Largest n ≤ ``limit`` such that ``prior_history`` plus n runs of the event keeps ε ≤ target.

    0 if even one more run exceeds the target. Exponential search then bisection; the answer
    satisfies ε(n) ≤ target < ε(n + 1) (unless n = ``limit``).
    """
    target_epsilon = _check_positive(target_epsilon, name="target_epsilon")
    delta = check_delta(delta)
    sample_rate = _check_sample_rate(sample_rate)
    noise_multiplier = _check_positive(noise_multiplier, name="noise_multiplier")
    accountant = check_accountant(accountant)
    prior = check_history(prior_history)
    limit = _check_count(limit, name="limit")

    def fits(n: int) -> bool:
        history = merge_step(
            prior, noise_multiplier=noise_multiplier, sample_rate=sample_rate, steps=n
        )
        return epsilon_from_history(history, delta=delta, accountant=accountant) <= target_epsilon

    if not fits(1):
        return 0
    good, bad = 1, 2  # invariant once bad is set: fits(good) and not fits(bad)
    while bad <= limit and fits(bad):
        good, bad = bad, 2 * bad
    if bad > limit:
        if fits(limit):
            return limit
        bad = limit
    while bad - good > 1:
        middle = (good + bad) // 2
        if fits(middle):
            good = middle
        else:
            bad = middle
    return good
