"""The privacy plan of a run: fixed before any data is read, never changed afterwards.

Privacy-critical. Two records: :class:`StepSchedule`, what a method asks of the plan (how it
samples, the expected sample size, how many steps read data, how many are free), and
:class:`PrivacyPlan`, what privacy/planning/planner.py ``make_plan`` fixes from it, the class sizes
and the budget (rates, noise multiplier, steps, the phases before the first step). The plan is the
single source the data stream (rates, step count), the method (noise multiplier, rates, normalisers)
and the privacy budget (events) read. It is stored in the run directory (plan.json, written and read
here) and in every checkpoint; a resumed run reuses it as stored and never recalibrates.

Phases before the first step (a class-size release, a DP auxiliary set made by another private
method on a declared budget share, as Dosser's SER uses) are part of the plan: the auxiliary run's
own plan is stored whole, and all phases are composed in one accountant (RDP orders added), which
is tighter than adding each phase's ε as Zheng et al.'s Dosser Theorem 2 (basic composition) does.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from dpdc_lightning.errors import UserError
from dpdc_lightning.privacy.mechanisms.counts import COUNT_MECHANISM, COUNT_PHASE, COUNT_SENSITIVITY
from dpdc_lightning.privacy.mechanisms.gaussian import PrivacyEvent

AUXILIARY_PHASE = "auxiliary"  # a DP auxiliary set bought before the first step (Dosser SER)

SAMPLING_KINDS = ("per_class_poisson", "per_class_fixed", "global_poisson")
_FORMAT = 1


@dataclass(frozen=True)
class StepSchedule:
    """What a method asks of the plan, derived from its config and the public shape of the data.

    ``sample_size`` is the expected number of records per class (per-class Poisson), per step
    (global Poisson) or the fixed batch per class (``per_class_fixed``, non-private baselines);
    None (Poisson kinds only): every record of each partition at every data step, i.e. q = 1
    (a method that releases the whole data set once, such as DP-MERF's mean embedding).
    ``data_steps`` read the private data; ``free_steps`` follow them and read nothing.
    """

    private: bool
    sampling: str
    sample_size: float | None
    data_steps: int
    free_steps: int = 0
    default_noise_multiplier: float | None = None
    steps_adjustable: bool = True  # False where the algorithm fixes the number of data steps

    def __post_init__(self) -> None:
        if self.sampling not in SAMPLING_KINDS:
            raise ValueError(f"sampling must be one of {SAMPLING_KINDS}, got {self.sampling!r}")
        if self.sample_size is None and self.sampling == "per_class_fixed":
            raise ValueError("a fixed-size sample needs a sample_size (None: every record, q = 1)")
        if self.private and self.sampling == "per_class_fixed":
            raise ValueError(
                "a fixed-size sample does not match the Poisson accounting; private methods "
                "sample by Poisson"
            )
        if self.data_steps < 0 or self.free_steps < 0:
            raise ValueError("step counts must be >= 0")


@dataclass(frozen=True)
class PrivacyPlan:
    """Everything about a run's privacy that is decided before the data is read."""

    private: bool
    sampling: str
    sample_size: float | None  # None: every record at every data step (q = 1)
    # Poisson rate per partition: one per class, or one for the whole set
    sample_rates: tuple[float, ...]
    data_steps: int
    free_steps: int
    noise_multiplier: float | None  # noise std / L2 sensitivity; None when not private
    delta: float | None
    target_epsilon: float | None
    accountant: str
    # ε after every data step, at ``delta`` (class-size release and auxiliary run included)
    planned_epsilon: float | None
    # privacy.class_sizes=private: the noise multiplier of the class-size release
    # (privacy/mechanisms/counts.py) and the released sizes the sample rates were computed from;
    # None when sizes are public.
    count_noise_multiplier: float | None = None
    released_class_sizes: tuple[float, ...] | None = None
    # The event the class-size release spent (PrivacyEvent.to_dict()), as
    # privacy/mechanisms/counts.py returned it: the accountant composes this event, not one
    # re-derived from the noise multiplier above.
    count_event: dict[str, Any] | None = None
    # A DP auxiliary set made before the first step (Dosser SER, method.aux.source=dp): the whole
    # plan of that run (PrivacyPlan.to_dict()); None when there is none.
    auxiliary_plan: dict[str, Any] | None = None
    auxiliary_method: str | None = None
    # The class sizes the rates were computed from: the public sizes, or the released ones above.
    # Once the plan exists these are the only sizes anything sees (DataSpec, normalisers, messages):
    # with private sizes, the exact counts never leave plan_run.
    class_sizes: tuple[float, ...] = ()
    # The L2 sensitivity the method declares for a data step's rows (methods/release.py), a
    # function of the config and the public shape: set when the method is built, before a record
    # is read. Every event must spend it (privacy/accounting/budget.py); verify checks
    # privacy.json's noise std against noise_multiplier x this. None: not private, or not yet built.
    sensitivity: float | None = None

    @property
    def total_steps(self) -> int:
        return self.data_steps + self.free_steps

    @property
    def sample_rate(self) -> float:
        """The accounted q of one data step: the largest partition rate (parallel composition)."""
        return max(self.sample_rates) if self.sample_rates else 1.0

    def rate_of(self, partition: int) -> float:
        """Poisson rate of one class (or of the whole set, partition -1, under global sampling)."""
        return (
            self.sample_rates[0]
            if self.sampling == "global_poisson"
            else self.sample_rates[partition]
        )

    def expected_sample_size(self, partition: int) -> float:
        """q x N of one partition (a class, or -1 for the whole set under global sampling): the
        normaliser of its noisy sum. N is the plan's size (public, or released under DP), never an
        exact private count and never the realised sample size."""
        if not self.class_sizes:
            raise UserError(
                "the stored privacy plan holds no class sizes (it was written by an older "
                "version); "
                "start a new run"
            )
        size = (
            sum(self.class_sizes)
            if self.sampling == "global_poisson"
            else self.class_sizes[partition]
        )
        return self.rate_of(partition) * size

    def __post_init__(self) -> None:
        count = self.count_event
        if (count is None) != (self.count_noise_multiplier is None) or (
            count is not None and count["noise_multiplier"] != self.count_noise_multiplier
        ):
            raise ValueError(
                "the plan's class-size release event and its noise multiplier disagree"
            )

    def prior_events(self) -> list[tuple[str, PrivacyEvent, int]]:
        """What was spent before the first step, as (phase, event, runs): the class-size release
        (the event it returned) and the auxiliary run (its data steps at its plan's event)."""
        events = (
            [(COUNT_PHASE, PrivacyEvent.from_dict(self.count_event), 1)] if self.count_event else []
        )
        auxiliary = self.auxiliary
        if auxiliary is not None and auxiliary.data_steps:
            events.append((AUXILIARY_PHASE, auxiliary.event(), auxiliary.data_steps))
        return events

    @property
    def auxiliary(self) -> PrivacyPlan | None:
        """The plan of the DP auxiliary run, if this run bought one."""
        return (
            PrivacyPlan.from_dict(self.auxiliary_plan) if self.auxiliary_plan is not None else None
        )

    def is_data_step(self, step: int) -> bool:
        return 0 <= step < self.data_steps

    def event(self) -> PrivacyEvent | None:
        """What one data step spends; None for a non-private run."""
        if not self.private:
            return None
        return PrivacyEvent(
            noise_multiplier=float(self.noise_multiplier), sample_rate=self.sample_rate
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain Python types only: JSON for plan.json, and loadable with ``weights_only=True``."""
        state = dataclasses.asdict(self)
        state["sample_rates"] = list(self.sample_rates)
        state["class_sizes"] = list(self.class_sizes)
        if self.released_class_sizes is not None:
            state["released_class_sizes"] = list(self.released_class_sizes)
        return {"format": _FORMAT, **state}

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> PrivacyPlan:
        state = dict(state)
        if state.pop("format", None) != _FORMAT:
            raise UserError(
                "the stored privacy plan has an unknown format; it was written by another version"
            )
        state["sample_rates"] = tuple(float(rate) for rate in state["sample_rates"])
        # Plans stored before they held their sizes: released sizes are the sizes; public ones are
        # absent.
        state["class_sizes"] = tuple(
            float(n) for n in state.get("class_sizes") or state.get("released_class_sizes") or ()
        )
        if state.get("released_class_sizes") is not None:
            state["released_class_sizes"] = tuple(float(n) for n in state["released_class_sizes"])
        if state.get("count_noise_multiplier") is not None and state.get("count_event") is None:
            # A plan stored before it kept the release's event: the same Gaussian release, restated.
            state["count_event"] = PrivacyEvent(
                noise_multiplier=state["count_noise_multiplier"],
                sample_rate=1.0,
                mechanism=COUNT_MECHANISM,
                sensitivity=COUNT_SENSITIVITY,
            ).to_dict()
        return cls(**state)

    def summary(self) -> dict[str, Any]:
        """The plan as the public report states it."""
        summary = {
            "noise_multiplier": self.noise_multiplier,
            "sample_rate": self.sample_rate,
            "data_steps": self.data_steps,
            "free_steps": self.free_steps,
            "planned_epsilon": self.planned_epsilon,
            "target_epsilon": self.target_epsilon,
            "class_sizes": self.class_size_statement(),
        }
        auxiliary = self.auxiliary
        if auxiliary is not None:
            summary["auxiliary"] = {
                "method": self.auxiliary_method,
                "noise_multiplier": auxiliary.noise_multiplier,
                "sample_rate": auxiliary.sample_rate,
                "data_steps": auxiliary.data_steps,
                "epsilon_alone": auxiliary.planned_epsilon,
            }
        return summary

    def class_size_statement(self) -> dict[str, Any]:
        """How the class sizes behind the sample rates were obtained."""
        if self.count_noise_multiplier is None:
            return {
                "status": "public by assumption",
                "why": (
                    "they set the sample rates q_c = L / N_c; "
                    "Zheng & Li's DPDC treats them as public"
                ),
            }
        event = PrivacyEvent.from_dict(self.count_event)
        return {
            "status": "released under differential privacy",
            "released": list(self.released_class_sizes),
            "mechanism": event.mechanism,
            "sensitivity": event.sensitivity,
            "noise_multiplier": event.noise_multiplier,
            "noise_std": event.noise_std,
        }
