"""make_plan: how a method's schedule, the class sizes and the budget become a PrivacyPlan.

Privacy-critical. The public class sizes (or the sizes released under DP,
privacy/mechanisms/counts.py) turn the method's expected sample size into Poisson rates q_c = L /
N_c (per class) or q = B / N (global); the target ε turns into a noise multiplier or a step count; δ
must stay below 1/N. One data step of a private method costs one Poisson-subsampled Gaussian
mechanism at q = max_c q_c: the classes are disjoint parts of the data (parallel composition, Zheng
& Li, "Differentially Private Dataset Condensation", Cor. A.1). Free steps read no data and cost
nothing.

Phases before the first step (the class-size release, a DP auxiliary run) count towards the target
with the steps, composed in one accountant (privacy/planning/plan.py says how the plan keeps them).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from dpdc_lightning.errors import UserError
from dpdc_lightning.privacy.accounting.analysis import History, epsilon_from_history
from dpdc_lightning.privacy.accounting.calibration import calibrate_noise_multiplier, max_steps
from dpdc_lightning.privacy.mechanisms.gaussian import PrivacyEvent
from dpdc_lightning.privacy.planning.plan import PrivacyPlan, StepSchedule


def make_plan(
    schedule: StepSchedule,
    *,
    class_sizes: Sequence[float],
    method: str,
    noise_multiplier: float | None,
    target_epsilon: float | None,
    delta: float,
    calibrate: str,
    accountant: str,
    step_cap: int | None = None,
    count_event: PrivacyEvent | None = None,
    allow_large_delta: bool = False,
    auxiliary: PrivacyPlan | None = None,
    auxiliary_method: str | None = None,
) -> PrivacyPlan:
    """Fix the plan of a run.

    - no target: the given (or the method's default) noise multiplier, every data step;
    - target, calibrate="sigma": the smallest noise multiplier keeping ε(data steps) <= target;
    - target, calibrate="steps": the largest number of data steps keeping ε <= target.
    ``step_cap`` (``trainer.max_steps``) caps the data steps first, then the free steps.
    With ``count_event``, ``class_sizes`` are the sizes released by privacy/mechanisms/counts.py
    with that event; ``auxiliary`` is the plan of a private run made before this one on the same
    data. Both count towards the target with the steps. A private plan needs ``delta < 1 / N`` (N =
    sum of the class sizes) unless ``allow_large_delta``.
    """
    data_steps, free_steps = capped_steps(schedule, step_cap=step_cap)
    rates = sample_rates(schedule, class_sizes)
    shape = plan_shape(schedule, rates, class_sizes, free_steps=free_steps, accountant=accountant)
    if not schedule.private:
        asked = (target_epsilon, noise_multiplier, count_event, auxiliary)
        return public_plan(shape, data_steps=data_steps, method=method, asked=asked)
    check_delta_size(delta, records=sum(class_sizes), allow_large_delta=allow_large_delta)
    q, prior = max(rates), prior_history(count_event, auxiliary)
    sigma, data_steps = fix_noise_or_steps(
        schedule,
        method=method,
        noise_multiplier=noise_multiplier,
        target_epsilon=target_epsilon,
        delta=delta,
        calibrate=calibrate,
        accountant=accountant,
        sample_rate=q,
        data_steps=data_steps,
        prior=prior,
    )
    history = prior + ([(sigma, q, data_steps)] if data_steps else [])
    planned = epsilon_from_history(history, delta=delta, accountant=accountant) if history else 0.0
    if target_epsilon is not None and planned > target_epsilon:  # calibration never allows it
        raise RuntimeError(f"plan error: ε {planned} above the target {target_epsilon}")
    return PrivacyPlan(
        **shape,
        data_steps=data_steps,
        noise_multiplier=float(sigma),
        delta=delta,
        target_epsilon=target_epsilon,
        planned_epsilon=planned,
        **prior_phases(count_event, class_sizes, auxiliary, auxiliary_method),
    )


def plan_shape(
    schedule: StepSchedule,
    rates: tuple[float, ...],
    class_sizes: Sequence[float],
    *,
    free_steps: int,
    accountant: str,
) -> dict:
    """The fields a private and a non-private plan fill alike."""
    return dict(
        private=schedule.private,
        sampling=schedule.sampling,
        sample_size=None if schedule.sample_size is None else float(schedule.sample_size),
        sample_rates=rates,
        free_steps=free_steps,
        accountant=accountant,
        class_sizes=tuple(float(n) for n in class_sizes),
    )


def public_plan(
    shape: dict, *, data_steps: int, method: str, asked: tuple[object, ...]
) -> PrivacyPlan:
    """The plan of a non-private method: no noise, no δ, no ε. ``asked`` holds what only a private
    run takes (target ε, noise multiplier, class-size release, auxiliary run): all must be None."""
    if any(value is not None for value in asked):
        raise UserError(
            f"method {method} is not private: privacy.target_epsilon and "
            "privacy.noise_multiplier do not apply"
        )
    return PrivacyPlan(
        **shape,
        data_steps=data_steps,
        noise_multiplier=None,
        delta=None,
        target_epsilon=None,
        planned_epsilon=None,
    )


def capped_steps(schedule: StepSchedule, *, step_cap: int | None) -> tuple[int, int]:
    """(data steps, free steps) under ``trainer.max_steps``: the cap takes the data steps first."""
    data_steps, free_steps = schedule.data_steps, schedule.free_steps
    if step_cap is not None and step_cap > 0:
        data_steps = min(data_steps, step_cap)
        free_steps = min(free_steps, step_cap - data_steps)
    return data_steps, free_steps


def sample_rates(schedule: StepSchedule, class_sizes: Sequence[float]) -> tuple[float, ...]:
    """Poisson rates from the plan's class sizes (public, or released under DP): L / N_c per class,
    or B / N for global sampling; 1 for every partition when the schedule reads every record."""
    if schedule.sample_size is None:  # every record once per data step: Poisson at q = 1
        return (1.0,) * (1 if schedule.sampling == "global_poisson" else len(class_sizes))
    if schedule.sampling == "global_poisson":
        return (min(1.0, schedule.sample_size / sum(class_sizes)),)
    if schedule.sampling == "per_class_poisson":
        if schedule.sample_size > min(class_sizes):
            raise UserError(
                f"the expected sample per class ({schedule.sample_size:g}) is larger than the "
                f"smallest class ({min(class_sizes):g} records); lower method.group_size"
            )
        return tuple(schedule.sample_size / size for size in class_sizes)
    return ()


def check_delta_size(delta: float, *, records: int, allow_large_delta: bool) -> None:
    """Refuse δ >= 1/N. Privacy-critical: a δ of the order of 1/N is met by a mechanism that
    publishes the complete records of a few participants (Dwork & Roth, "The Algorithmic
    Foundations of Differential Privacy", §2.3), so such a guarantee says nothing.
    With ``allow_large_delta`` the run goes on, and the owner's console says why it should not."""
    if delta * records < 1:
        return
    message = (
        f"privacy.delta={delta:g} is not below 1/N = {1 / records:.3g} (N = {records:g} private "
        "records): at such a delta a mechanism may publish whole records"
    )
    if not allow_large_delta:
        raise UserError(
            f"{message}; lower privacy.delta, or set privacy.allow_large_delta=true to accept it"
        )
    print(f"warning: {message}; accepted because privacy.allow_large_delta=true", file=sys.stderr)


def prior_history(
    count_event: PrivacyEvent | None, auxiliary: PrivacyPlan | None
) -> list[tuple[float, float, int]]:
    """What is spent before the first step, as mechanism runs: the class-size release (once), then
    the auxiliary run's data steps."""
    count = [(count_event.noise_multiplier, count_event.sample_rate, 1)] if count_event else []
    return count + auxiliary_history(auxiliary)


def auxiliary_history(auxiliary: PrivacyPlan | None) -> list[tuple[float, float, int]]:
    """The mechanism runs of an auxiliary plan (one entry: its data steps at its noise and rate)."""
    if auxiliary is None or not auxiliary.data_steps:
        return []
    if auxiliary.count_noise_multiplier is not None or auxiliary.auxiliary_plan is not None:
        raise ValueError(
            "an auxiliary run must not hold phases of its own (they belong to the main plan)"
        )
    return [(float(auxiliary.noise_multiplier), auxiliary.sample_rate, auxiliary.data_steps)]


def fix_noise_or_steps(
    schedule: StepSchedule,
    *,
    method: str,
    noise_multiplier: float | None,
    target_epsilon: float | None,
    delta: float,
    calibrate: str,
    accountant: str,
    sample_rate: float,
    data_steps: int,
    prior: History,
) -> tuple[float, int]:
    """(σ, data steps) of a private plan: as given without a target; with one, σ calibrated
    (``calibrate="sigma"``) or the steps cut to what the target allows (``"steps"``)."""
    sigma = noise_multiplier or schedule.default_noise_multiplier
    if target_epsilon is None:
        return sigma, data_steps
    if calibrate == "sigma":
        if noise_multiplier is not None:
            raise UserError(
                "set either privacy.noise_multiplier or privacy.target_epsilon with "
                "privacy.calibrate=sigma, not both"
            )
        sigma = calibrate_noise_multiplier(
            target_epsilon=target_epsilon,
            delta=delta,
            sample_rate=sample_rate,
            steps=data_steps,
            accountant=accountant,
            prior_history=prior,
        )
        return sigma, data_steps
    if not schedule.steps_adjustable:
        raise UserError(f"method {method} has a fixed number of steps; use privacy.calibrate=sigma")
    steps = max_steps(
        target_epsilon=target_epsilon,
        delta=delta,
        sample_rate=sample_rate,
        noise_multiplier=sigma,
        accountant=accountant,
        limit=data_steps,
        prior_history=prior,
    )
    if steps == 0:
        raise UserError(
            f"privacy.target_epsilon={target_epsilon} is unreachable: even one step at noise "
            f"multiplier {sigma} and sample rate {sample_rate:.4g} costs more; raise "
            "privacy.noise_multiplier"
        )
    return sigma, steps


def prior_phases(
    count_event: PrivacyEvent | None,
    class_sizes: Sequence[float],
    auxiliary: PrivacyPlan | None,
    auxiliary_method: str | None,
) -> dict:
    """The plan's record of the phases before the first step: the class-size release (its event,
    noise multiplier and the released sizes) and the auxiliary run's whole plan."""
    counted = count_event is not None
    return dict(
        count_noise_multiplier=count_event.noise_multiplier if counted else None,
        released_class_sizes=tuple(float(n) for n in class_sizes) if counted else None,
        count_event=count_event.to_dict() if counted else None,
        auxiliary_plan=auxiliary.to_dict() if auxiliary is not None else None,
        auxiliary_method=auxiliary_method if auxiliary is not None else None,
    )
