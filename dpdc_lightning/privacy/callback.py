"""PrivacyCallback: composes the privacy cost of every data step and enforces the run's plan.

Privacy-critical. One data step of a private method is one sampled Gaussian mechanism with the
plan's event (noise multiplier, q = max_c q_c by parallel composition over disjoint classes; Zheng
& Li, "Differentially Private Dataset Condensation", Cor. A.1); a free step spends nothing. The
callback reads everything from the PrivacyPlan (privacy/plan.py) and enforces it itself:

- before the first step, the restored history plus the plan's remaining data steps must stay within
  the target ε, and a checkpoint made under another plan is refused;
- every step's events are checked against the plan (at most one per disjoint partition, none
  costlier than planned, none on a free step) and composed into an Opacus-backed accountant;
- a data step beyond the plan's count is an error, and the run is told to stop after the last one
  (the data stream and the module refuse further steps too, so ``trainer.min_steps`` cannot
  extend the run).

Its state (the accountant's history and the plan) is saved in every checkpoint and restored on
resume, so a resumed run reports exactly the ε of an uninterrupted one.
"""

from __future__ import annotations

from typing import Any, Optional

import lightning as L

from dpdc_lightning.errors import UserError
from dpdc_lightning.privacy.accounting import DEFAULT_PHASE, PrivacyAccountant
from dpdc_lightning.privacy.counts import COUNT_PHASE
from dpdc_lightning.privacy.mechanisms import PrivacyEvent
from dpdc_lightning.privacy.plan import PrivacyPlan

AUXILIARY_PHASE = "auxiliary"  # a DP auxiliary set bought before the first step (Dosser SER)


class PrivacyCallback(L.Callback):
    def __init__(self, plan: PrivacyPlan, *, log_every_n_steps: int = 10) -> None:
        self.plan = plan
        self.accountant = PrivacyAccountant(accountant=plan.accountant)
        if plan.count_noise_multiplier is not None:  # the class sizes were released before the first step
            self.accountant.start_phase(COUNT_PHASE)
            self.accountant.step(PrivacyEvent(noise_multiplier=plan.count_noise_multiplier, sample_rate=1.0))
        auxiliary = plan.auxiliary
        if auxiliary is not None and auxiliary.data_steps:  # a DP auxiliary set was made before the first step
            self.accountant.start_phase(AUXILIARY_PHASE)
            self.accountant.step(auxiliary.event(), num_steps=auxiliary.data_steps)
        if self.accountant.phases:
            self.accountant.start_phase(DEFAULT_PHASE)
        self.log_every_n_steps = log_every_n_steps
        self.epsilon: Optional[float] = None

    @property
    def delta(self) -> Optional[float]:
        return self.plan.delta

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self.plan.private:
            return
        self.epsilon = self._current_epsilon()
        remaining = self.plan.data_steps - self.data_steps_spent
        if remaining < 0:
            raise RuntimeError(f"the accountant holds {self.data_steps_spent} steps, the plan only "
                               f"{self.plan.data_steps}")
        target = self.plan.target_epsilon
        if target is not None and remaining and self.accountant.epsilon_if(
                self.plan.event(), num_steps=remaining, delta=self.delta) > target:
            raise UserError(f"privacy budget: the plan's remaining {remaining} steps would take ε above "
                            f"privacy.target_epsilon={target}; the run was not started")

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        step = int(batch["step"])
        spent_all = self.plan.private and self.data_steps_spent >= self.plan.data_steps
        if step >= self.plan.total_steps or (self.plan.is_data_step(step) and spent_all):
            raise RuntimeError(f"step {step} is beyond the plan ({self.plan.data_steps} data steps, "
                               f"{self.plan.free_steps} free steps)")

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        events = pl_module.pop_events()
        data_step = self.plan.is_data_step(int(batch["step"]))
        if not (self.plan.private and data_step):
            if events:
                raise RuntimeError("a non-private method or a free step spent privacy events")
        else:
            self._check(events)
            self.accountant.step(self.plan.event())
            # RDP is cheap enough to evaluate every step; PRV is not.
            if self.accountant.accountant == "rdp" or self.data_steps_spent % self.log_every_n_steps == 0:
                self.epsilon = self._current_epsilon()
        if int(batch["step"]) + 1 >= self.plan.total_steps:
            trainer.should_stop = True
        if self.epsilon is not None:
            pl_module.log("epsilon", self.epsilon, prog_bar=True, batch_size=1)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.plan.private:
            self.epsilon = self._current_epsilon()

    @property
    def data_steps_spent(self) -> int:
        return self.accountant.steps_of(DEFAULT_PHASE)

    def _current_epsilon(self) -> float:
        return self.accountant.get_epsilon(delta=self.delta) if self.accountant.total_steps else 0.0

    def _check(self, events: list[tuple[int, PrivacyEvent]]) -> None:
        """A data step must spend at least one event, at most one per disjoint part of the data
        (parallel composition holds only across disjoint parts), each no costlier than the plan."""
        if not events:
            raise RuntimeError("a private step returned no privacy event; its cost would go unaccounted")
        partitions = [partition for partition, _ in events]
        if len(set(partitions)) != len(partitions) or (-1 in partitions and len(partitions) > 1):
            raise RuntimeError(f"one step queried the same data twice (partitions {partitions}); the plan covers one query")
        planned = self.plan.event()
        for _, event in events:
            if event.noise_multiplier < planned.noise_multiplier or event.sample_rate > planned.sample_rate:
                raise RuntimeError(f"spent {event} is costlier than the planned {planned}")

    def state_dict(self) -> dict[str, Any]:
        return {"accountant": self.accountant.state_dict(), "plan": self.plan.to_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if PrivacyPlan.from_dict(state_dict["plan"]) != self.plan:
            raise UserError("the checkpoint was made under another privacy plan; a run's plan never changes "
                            "on resume")
        self.accountant.load_state_dict(state_dict["accountant"])
