"""PrivacyCallback: the trainer's hooks around the run's
:class:`~dpdc_lightning.privacy.accounting.budget.PrivacyBudget`.

The budget (pure, privacy/accounting/budget.py) enforces the plan and composes the events each step
spent; this adapter hands it the steps and the events, asks the trainer to stop after the plan's
last step, logs ε, and keeps the budget's state in every checkpoint.
"""

from __future__ import annotations

from typing import Any

import lightning as L

from dpdc_lightning.privacy.accounting.budget import PrivacyBudget
from dpdc_lightning.privacy.planning.plan import PrivacyPlan


class PrivacyCallback(L.Callback):
    def __init__(self, plan: PrivacyPlan, *, log_every_n_steps: int = 10) -> None:
        self.budget = PrivacyBudget(plan)
        self.plan = plan
        self.log_every_n_steps = log_every_n_steps
        self.epsilon: float | None = None

    @property
    def accountant(self) -> Any:
        return self.budget.accountant

    @property
    def delta(self) -> float | None:
        return self.plan.delta

    @property
    def data_steps_spent(self) -> int:
        return self.budget.data_steps_spent

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.plan.private:
            self.epsilon = self.budget.epsilon()
            self.budget.check_start()

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self.budget.check_step(int(batch["step"]))

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        step = int(batch["step"])
        if self.budget.spend(step, pl_module.pop_events()):
            # RDP is cheap enough to evaluate every step; PRV is not.
            if (
                self.accountant.accountant == "rdp"
                or self.data_steps_spent % self.log_every_n_steps == 0
            ):
                self.epsilon = self.budget.epsilon()
        if step + 1 >= self.plan.total_steps:
            trainer.should_stop = True
        if self.epsilon is not None:
            pl_module.log("epsilon", self.epsilon, prog_bar=True, batch_size=1)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.plan.private:
            self.epsilon = self.budget.epsilon()

    def state_dict(self) -> dict[str, Any]:
        return self.budget.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.budget.load_state_dict(state_dict)
