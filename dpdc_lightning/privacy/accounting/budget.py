"""The privacy budget of one run: the plan enforced, the events spent composed, the report's
mechanism stated from those events. Pure (no Lightning): ``engine/privacy_callback.py`` calls it
from the trainer's hooks.

Privacy-critical. One data step of a private method is one sampled Gaussian mechanism: each class is
queried once on its own disjoint part of the data, so the step costs one mechanism at q = max_c q_c
(parallel composition; Zheng & Li, "Differentially Private Dataset Condensation", Cor. A.1). The
budget therefore composes, per data step, the mechanism the step's events spent at the plan's noise
multiplier and q, which bound every one of them (under DDP a process sees only its own classes, and
every process must compose the same cost). It refuses a step beyond the plan, a step that spends no
event, a part of the data queried twice and an event costlier than planned; a free step spends
nothing. What was spent before the first step (the class-size release, a DP auxiliary run) comes
from the plan, which carries those events.

Its state (the accountant's history, the plan, the description of the mechanism spent) is kept in
every checkpoint, so a resumed run reports exactly the ε of an uninterrupted one.
"""

from __future__ import annotations

from typing import Any

from dpdc_lightning.errors import UserError
from dpdc_lightning.privacy.accounting.accountant import DEFAULT_PHASE, PrivacyAccountant
from dpdc_lightning.privacy.mechanisms.gaussian import PrivacyEvent
from dpdc_lightning.privacy.planning.plan import PrivacyPlan

Spent = list[tuple[int, PrivacyEvent]]  # (partition: a class, or -1 for the whole set; event)


class PrivacyBudget:
    def __init__(self, plan: PrivacyPlan) -> None:
        self.plan = plan
        self.accountant = PrivacyAccountant(accountant=plan.accountant)
        for phase, event, runs in plan.prior_events():
            self.accountant.start_phase(phase)
            self.accountant.step(event, num_steps=runs)
        if self.accountant.phases:
            self.accountant.start_phase(DEFAULT_PHASE)
        self.mechanism: dict[str, Any] = {}  # the report's statement of the condensation's events

    @property
    def data_steps_spent(self) -> int:
        return self.accountant.steps_of(DEFAULT_PHASE)

    def epsilon(self) -> float:
        return (
            self.accountant.get_epsilon(delta=self.plan.delta)
            if self.accountant.total_steps
            else 0.0
        )

    def check_start(self) -> None:
        """Before the first step (fresh or resumed): the plan's remaining steps fit the target."""
        if not self.plan.private:
            return
        remaining = self.plan.data_steps - self.data_steps_spent
        if remaining < 0:
            raise RuntimeError(
                f"the accountant holds {self.data_steps_spent} steps, "
                f"the plan only {self.plan.data_steps}"
            )
        target = self.plan.target_epsilon
        if (
            target is not None
            and remaining
            and self.accountant.epsilon_if(
                self.plan.event(), num_steps=remaining, delta=self.plan.delta
            )
            > target
        ):
            raise UserError(
                f"privacy budget: the plan's remaining {remaining} steps would take ε above "
                f"privacy.target_epsilon={target}; the run was not started"
            )

    def check_step(self, step: int) -> None:
        """Before a step runs: it must lie within the plan."""
        plan = self.plan
        spent_all = plan.private and self.data_steps_spent >= plan.data_steps
        if step >= plan.total_steps or (plan.is_data_step(step) and spent_all):
            raise RuntimeError(
                f"step {step} is beyond the plan "
                f"({plan.data_steps} data steps, {plan.free_steps} free steps)"
            )

    def spend(self, step: int, events: Spent) -> bool:
        """Compose what ``step`` spent; True when it was a private data step."""
        if not (self.plan.private and self.plan.is_data_step(step)):
            if events:
                raise RuntimeError("a non-private method or a free step spent privacy events")
            return False
        self.accountant.step(self._step_event(events))
        return True

    def _step_event(self, events: Spent) -> PrivacyEvent:
        """The one mechanism a data step counts as: the mechanism the events spent (one per disjoint
        partition, none costlier than planned) at the plan's cost, which bounds each of them: its
        noise multiplier and q = max_c q_c."""
        if not events:
            raise RuntimeError(
                "a private step returned no privacy event; its cost would go unaccounted"
            )
        partitions = [partition for partition, _ in events]
        if len(set(partitions)) != len(partitions) or (-1 in partitions and len(partitions) > 1):
            raise RuntimeError(
                f"one step queried the same data twice (partitions {partitions}); "
                "the plan covers one query"
            )
        planned = self.plan.event()
        for _, event in events:
            if (
                event.noise_multiplier < planned.noise_multiplier
                or event.sample_rate > planned.sample_rate
            ):
                raise RuntimeError(f"spent {event} is costlier than the planned {planned}")
        described = {
            (e.mechanism, e.sensitivity, e.noise_multiplier, e.expected_size) for _, e in events
        }
        if len(described) != 1:
            raise RuntimeError(
                "one step spent different mechanisms on its partitions: "
                f"{sorted(map(str, described))}"
            )
        spent = events[0][1]
        if self.plan.sensitivity is not None and spent.sensitivity != self.plan.sensitivity:
            raise RuntimeError(
                f"spent sensitivity {spent.sensitivity}, the plan's {self.plan.sensitivity}"
            )
        step_event = PrivacyEvent(
            noise_multiplier=planned.noise_multiplier,
            sample_rate=planned.sample_rate,
            mechanism=spent.mechanism,
            sensitivity=spent.sensitivity,
            expected_size=spent.expected_size,
        )
        self.mechanism = _statement(step_event, whole_set=partitions == [-1])
        return step_event

    def state_dict(self) -> dict[str, Any]:
        return {
            "accountant": self.accountant.state_dict(),
            "plan": self.plan.to_dict(),
            "mechanism": self.mechanism,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if PrivacyPlan.from_dict(state["plan"]) != self.plan:
            raise UserError(
                "the checkpoint was made under another privacy plan; "
                "a run's plan never changes on resume"
            )
        self.accountant.load_state_dict(state["accountant"])
        self.mechanism = dict(state.get("mechanism") or {})


def _statement(event: PrivacyEvent, *, whole_set: bool) -> dict[str, Any]:
    """One data step's mechanism as privacy.json states it: every number from the event spent."""
    where = (
        "over the whole data set"
        if whole_set
        else "per class (disjoint classes: parallel composition)"
    )
    statement: dict[str, Any] = {
        "mechanism": f"{event.mechanism}, {where}",
        "sensitivity": event.sensitivity,
        "noise_multiplier": event.noise_multiplier,
        "noise_std": event.noise_std,
        "sample_rate": event.sample_rate,
    }
    if event.expected_size is not None:  # the public normaliser of the noisy sum
        statement["expected_batch_size" if whole_set else "expected_sample_size"] = (
            event.expected_size
        )
    return statement


def report_mechanism(budget: PrivacyBudget | None) -> dict[str, Any] | None:
    """The mechanism entry of privacy.json: None for a non-private run."""
    return None if budget is None or not budget.plan.private else dict(budget.mechanism)
