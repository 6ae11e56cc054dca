"""Up-front budget planning: turn (target ε, δ) into a noise multiplier or a number of steps.

Privacy-critical. Runs before any training, after the class sizes (public, as in DPDC) fix the
sample rate. The PrivacyCallback still enforces the target step by step; this only picks the
schedule so that the run uses the budget it was given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from dpdc_lightning.errors import UserError
from dpdc_lightning.privacy.calibration import calibrate_noise_multiplier, max_steps


@dataclass(frozen=True)
class BudgetPlan:
    noise_multiplier: Optional[float]
    steps: int


def plan_budget(*, private: bool, method: str, sample_rate: float, steps: int,
                default_noise_multiplier: Optional[float], noise_multiplier: Optional[float],
                target_epsilon: Optional[float], delta: float, calibrate: str, accountant: str,
                steps_adjustable: bool = True) -> BudgetPlan:
    """Resolve the noise multiplier and number of steps of a run.

    - no target: the given (or the method's default) noise multiplier, ``steps`` steps;
    - target, calibrate="sigma": the smallest noise multiplier keeping ε(steps) <= target;
    - target, calibrate="steps": the largest number of steps (<= ``steps``) keeping ε <= target.
    """
    if not private:
        if target_epsilon is not None or noise_multiplier is not None:
            raise UserError(f"method {method} is not private: privacy.target_epsilon and privacy.noise_multiplier do not apply")
        return BudgetPlan(noise_multiplier=None, steps=steps)
    if target_epsilon is None:
        return BudgetPlan(noise_multiplier=noise_multiplier or default_noise_multiplier, steps=steps)
    if calibrate == "sigma":
        if noise_multiplier is not None:
            raise UserError("set either privacy.noise_multiplier or privacy.target_epsilon with privacy.calibrate=sigma, not both")
        sigma = calibrate_noise_multiplier(target_epsilon=target_epsilon, delta=delta, sample_rate=sample_rate,
                                           steps=steps, accountant=accountant)
        return BudgetPlan(noise_multiplier=sigma, steps=steps)
    if not steps_adjustable:
        raise UserError(f"method {method} has a fixed number of steps; use privacy.calibrate=sigma")
    sigma = noise_multiplier or default_noise_multiplier
    allowed = max_steps(target_epsilon=target_epsilon, delta=delta, sample_rate=sample_rate,
                        noise_multiplier=sigma, accountant=accountant, limit=steps)
    if allowed == 0:
        raise UserError(f"privacy.target_epsilon={target_epsilon} is unreachable: even one step at noise multiplier "
                        f"{sigma} and sample rate {sample_rate:.4g} costs more; raise privacy.noise_multiplier")
    return BudgetPlan(noise_multiplier=sigma, steps=allowed)
