"""PrivacyCallback: composes the privacy cost of every executed step and halts at the target ε.

Privacy-critical. One step of a method is one sampled Gaussian mechanism with the method's planned
event (noise multiplier, q = max_c q_c by parallel composition over disjoint classes, DPDC
Cor. A.1). The callback checks the events the mechanisms actually returned against that plan,
composes the plan into an Opacus-backed accountant, and sets ``trainer.should_stop`` once one more
step would take ε above the target, so a run never ends above it. Its state (the accountant's
history) is saved in every checkpoint and restored on resume, so a resumed run reports exactly the
ε of an uninterrupted one.
"""

from __future__ import annotations

from typing import Any, Optional

import lightning as L

from dpdc_lightning.errors import UserError
from dpdc_lightning.privacy.accounting import PrivacyAccountant
from dpdc_lightning.privacy.calibration import max_steps
from dpdc_lightning.privacy.mechanisms import PrivacyEvent


class PrivacyCallback(L.Callback):
    def __init__(self, *, target_epsilon: Optional[float], delta: float, accountant: str = "rdp",
                 log_every_n_steps: int = 10) -> None:
        self.target_epsilon = target_epsilon
        self.delta = delta
        self.accountant = PrivacyAccountant(accountant=accountant)
        self.log_every_n_steps = log_every_n_steps
        self._plan: Optional[PrivacyEvent] = None
        self._steps_left: Optional[int] = None
        self.epsilon: Optional[float] = None

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._plan = pl_module.planned_event()
        if self._plan is None:
            return
        self.epsilon = self.accountant.get_epsilon(delta=self.delta) if self.accountant.total_steps else 0.0
        if self.target_epsilon is None:
            return
        # Fixed-cost phases (e.g. a DP auxiliary set) compose sequentially: they take their share first.
        fixed_epsilon = sum(p.fixed_epsilon for p in self.accountant.phases if p.is_fixed)
        self._steps_left = 0 if fixed_epsilon >= self.target_epsilon else max_steps(
            target_epsilon=self.target_epsilon - fixed_epsilon, delta=self.accountant.mechanism_delta(delta=self.delta),
            sample_rate=self._plan.sample_rate, noise_multiplier=self._plan.noise_multiplier,
            accountant=self.accountant.accountant, prior_history=self.accountant.history)
        # max_steps moved the fixed ε across the inequality; confirm on the exact total ε.
        while self._steps_left > 0 and self.accountant.epsilon_if(
                self._plan, num_steps=self._steps_left, delta=self.delta) > self.target_epsilon:
            self._steps_left -= 1
        if self._steps_left == 0:
            raise UserError(f"privacy budget exhausted: ε is {self.epsilon:.4f} and one more step would exceed "
                            f"privacy.target_epsilon={self.target_epsilon}")

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        events = pl_module.pop_events()
        if self._plan is None:
            if events:
                raise RuntimeError("a non-private method spent privacy events")
            return
        self._check(events)
        self.accountant.step(self._plan)
        if self._steps_left is not None:
            self._steps_left -= 1
            if self._steps_left <= 0:
                trainer.should_stop = True
        # RDP is cheap enough to evaluate every step; PRV is not.
        cheap = self.accountant.accountant == "rdp"
        if cheap or self.accountant.total_steps % self.log_every_n_steps == 0 or trainer.should_stop:
            self.epsilon = self.accountant.get_epsilon(delta=self.delta)
        if self.epsilon is not None:
            pl_module.log("epsilon", self.epsilon, prog_bar=True, batch_size=1)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._plan is not None:
            self.epsilon = self.accountant.get_epsilon(delta=self.delta) if self.accountant.total_steps else 0.0

    def _check(self, events: list[tuple[int, PrivacyEvent]]) -> None:
        """A step must spend at least one event, at most one per disjoint part of the data (parallel
        composition holds only across disjoint parts), each no costlier than the plan."""
        if not events:
            raise RuntimeError("a private step returned no privacy event; its cost would go unaccounted")
        partitions = [partition for partition, _ in events]
        if len(set(partitions)) != len(partitions) or (-1 in partitions and len(partitions) > 1):
            raise RuntimeError(f"one step queried the same data twice (partitions {partitions}); the plan covers one query")
        for _, event in events:
            if event.noise_multiplier < self._plan.noise_multiplier or event.sample_rate > self._plan.sample_rate:
                raise RuntimeError(f"spent {event} is costlier than the planned {self._plan}")

    def state_dict(self) -> dict[str, Any]:
        return {"accountant": self.accountant.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.accountant.load_state_dict(state_dict["accountant"])
