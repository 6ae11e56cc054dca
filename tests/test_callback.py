"""PrivacyCallback: composes each step's cost, stops before the target ε, survives checkpoints.

Whole runs use NDPDC on the toy data (q = L / N_c = 4 / 48, noise multiplier 1), where a few
steps already cost ε ≈ 2; the unit tests drive the callback with a fake module and trainer.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import dpdc_lightning.training as training
from dpdc_lightning.config import PrivacyConfig, compose
from dpdc_lightning.errors import UserError
from dpdc_lightning.privacy.accounting import PrivacyAccountant
from dpdc_lightning.privacy.analysis import epsilon_from_history
from dpdc_lightning.privacy.budget import plan_budget
from dpdc_lightning.privacy.calibration import max_steps
from dpdc_lightning.privacy.callback import PrivacyCallback
from dpdc_lightning.privacy.mechanisms import PrivacyEvent

DELTA = 1e-5
RATE = 4 / 48  # group size 4 over the toy's 48 records per class
TARGET = 2.5  # 4 steps cost 2.48, 5 steps 2.59
ITERATIONS = 20


def _train(tmp_path: Path, name: str, *tokens: str) -> tuple[Path, dict]:
    overrides = ["method=ndpdc", "dataset=toy", "model.width=8", "model.depth=2", "method.ipc=2",
                 "method.group_size=4", f"method.iterations={ITERATIONS}", "trainer.enable_progress_bar=false",
                 f"run_dir={tmp_path / name}"]
    run_dir = training.train(compose([*overrides, *tokens]))
    return run_dir, json.loads((run_dir / "privacy.json").read_text())


def _allowed_steps(target: float = TARGET) -> int:
    steps = max_steps(target_epsilon=target, delta=DELTA, sample_rate=RATE, noise_multiplier=1.0)
    assert 2 <= steps < ITERATIONS  # the scenario needs a budget that ends the run early
    return steps


def _check_stopped_at_target(report: dict, *, target: float = TARGET) -> None:
    event = PrivacyEvent(noise_multiplier=1.0, sample_rate=RATE)
    steps = report["steps"]
    assert steps == _allowed_steps(target)
    assert report["noise_multiplier"] == 1.0 and report["sample_rate"] == pytest.approx(RATE, rel=1e-12)
    # The report's ε is the calculator's value for (noise multiplier, sample rate, steps) ...
    assert report["epsilon"] == pytest.approx(
        epsilon_from_history([(1.0, RATE, steps)], delta=DELTA, accountant="rdp"), rel=1e-12)
    # ... it is within the target, and one more step would have exceeded it.
    assert report["epsilon"] <= target
    accountant = PrivacyAccountant()
    accountant.step(event, num_steps=steps)
    assert accountant.get_epsilon(delta=DELTA) == pytest.approx(report["epsilon"], rel=1e-12)
    assert accountant.epsilon_if(event, delta=DELTA) > target


# --------------------------------------------------------------------------- whole runs


def test_calibrate_steps_plans_the_largest_count_within_target(tmp_path):
    _, report = _train(tmp_path, "planned", f"privacy.target_epsilon={TARGET}", "privacy.calibrate=steps")
    _check_stopped_at_target(report)
    assert report["target_epsilon"] == TARGET


def test_callback_alone_stops_a_stream_longer_than_the_budget(tmp_path, monkeypatch):
    """The plan is bypassed (the stream has all ITERATIONS steps): the callback must stop the run."""
    planned: list = []

    def no_plan(**kwargs):
        plan = plan_budget(**{**kwargs, "target_epsilon": None})  # default noise, every step
        planned.append(plan)
        return plan

    monkeypatch.setattr(training, "plan_budget", no_plan)
    run_dir, report = _train(tmp_path, "unplanned", f"privacy.target_epsilon={TARGET}", "privacy.calibrate=steps",
                             "method.checkpoint_every=1")
    assert planned and planned[0].steps == ITERATIONS
    _check_stopped_at_target(report)
    # The checkpoint (loadable without pickle) holds the callback's state: restoring it gives the same ε.
    checkpoint = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    states = [state for key, state in checkpoint["callbacks"].items() if "PrivacyCallback" in key]
    assert len(states) == 1
    restored = PrivacyCallback(target_epsilon=TARGET, delta=DELTA)
    restored.load_state_dict(states[0])
    assert restored.accountant.get_epsilon(delta=DELTA) == report["epsilon"]
    assert restored.accountant.total_steps == report["steps"]


def test_secure_noise_is_the_default_and_reproducible_noise_is_flagged(tmp_path):
    assert PrivacyConfig().reproducible_noise is False
    assert compose(["method=ndpdc"]).privacy.reproducible_noise is False
    _, secure = _train(tmp_path, "secure", "method.iterations=2")
    assert secure["noise_mode"] == "secure" and "warning" not in secure
    _, reproducible = _train(tmp_path, "reproducible", "method.iterations=2", "privacy.reproducible_noise=true")
    assert reproducible["noise_mode"] == "reproducible"
    assert "NOT private" in reproducible["warning"]
    assert secure["epsilon"] == reproducible["epsilon"] > 0


# --------------------------------------------------------------------------- the callback alone


PLAN = PrivacyEvent(noise_multiplier=1.0, sample_rate=RATE)


class FakeModule:
    """What the callback uses of a method: its plan, the events of a step, and log()."""

    def __init__(self, plan):
        self.plan, self.events, self.logged = plan, [], {}

    def planned_event(self):
        return self.plan

    def pop_events(self):
        events, self.events = self.events, []
        return events

    def log(self, name, value, **kwargs):
        self.logged[name] = value


def _start(callback: PrivacyCallback, plan=PLAN) -> tuple[SimpleNamespace, FakeModule]:
    trainer, module = SimpleNamespace(should_stop=False), FakeModule(plan)
    callback.on_fit_start(trainer, module)
    return trainer, module


def _step(callback, trainer, module, events) -> None:
    module.events = list(events)
    callback.on_train_batch_end(trainer, module, None, None, 0)


def _run_until_stop(callback, trainer, module, limit: int = 1000) -> int:
    steps = 0
    while not trainer.should_stop and steps < limit:
        _step(callback, trainer, module, [(c, PLAN) for c in range(4)])
        steps += 1
    return steps


def test_callback_stops_exactly_when_the_next_step_would_exceed_the_target():
    callback = PrivacyCallback(target_epsilon=TARGET, delta=DELTA)
    trainer, module = _start(callback)
    steps = _run_until_stop(callback, trainer, module)
    assert steps == _allowed_steps()
    assert callback.epsilon == module.logged["epsilon"] <= TARGET
    assert callback.accountant.epsilon_if(PLAN, delta=DELTA) > TARGET


def test_state_dict_round_trip_keeps_epsilon_exact_and_resumes_to_the_same_stop():
    uninterrupted = PrivacyCallback(target_epsilon=TARGET, delta=DELTA)
    trainer, module = _start(uninterrupted)
    total = _run_until_stop(uninterrupted, trainer, module)

    first = PrivacyCallback(target_epsilon=TARGET, delta=DELTA)
    trainer, module = _start(first)
    for _ in range(total - 1):
        _step(first, trainer, module, [(0, PLAN)])
    assert not trainer.should_stop
    state = json.loads(json.dumps(first.state_dict()))  # checkpoints must hold plain types
    resumed = PrivacyCallback(target_epsilon=TARGET, delta=DELTA)
    resumed.load_state_dict(state)
    assert resumed.accountant.get_epsilon(delta=DELTA) == first.accountant.get_epsilon(delta=DELTA)
    trainer, module = _start(resumed)
    assert _run_until_stop(resumed, trainer, module) == 1
    resumed.on_train_end(trainer, module)
    uninterrupted.on_train_end(trainer, module)
    assert resumed.epsilon == uninterrupted.epsilon
    assert resumed.accountant.history == uninterrupted.accountant.history


@pytest.mark.parametrize("events, message", [
    ([], "no privacy event"),
    ([(0, PLAN), (0, PLAN)], "same data twice"),
    ([(-1, PLAN), (0, PLAN)], "same data twice"),
    ([(0, PLAN), (1, PrivacyEvent(noise_multiplier=0.9, sample_rate=RATE))], "costlier"),
    ([(0, PrivacyEvent(noise_multiplier=1.0, sample_rate=RATE * 1.01))], "costlier"),
])
def test_a_step_outside_the_plan_raises(events, message):
    callback = PrivacyCallback(target_epsilon=None, delta=DELTA)
    trainer, module = _start(callback)
    _step(callback, trainer, module, [(0, PLAN), (1, PLAN)])  # a valid step first
    with pytest.raises(RuntimeError, match=message):
        _step(callback, trainer, module, events)
    assert callback.accountant.total_steps == 1  # the bad step was not silently accounted


def test_a_cheaper_event_is_accounted_at_the_planned_cost():
    callback = PrivacyCallback(target_epsilon=None, delta=DELTA)
    trainer, module = _start(callback)
    _step(callback, trainer, module, [(0, PrivacyEvent(noise_multiplier=3.0, sample_rate=RATE / 2))])
    assert callback.accountant.history == [(PLAN.noise_multiplier, PLAN.sample_rate, 1)]


def test_a_non_private_method_spending_events_raises():
    callback = PrivacyCallback(target_epsilon=None, delta=DELTA)
    trainer, module = _start(callback, plan=None)
    _step(callback, trainer, module, [])
    assert callback.accountant.total_steps == 0 and callback.epsilon is None
    with pytest.raises(RuntimeError, match="non-private"):
        _step(callback, trainer, module, [(0, PLAN)])


@pytest.mark.parametrize("spent_steps", [0, 10_000])
def test_exhausted_budget_at_fit_start_is_a_user_error(spent_steps):
    """A resumed run whose history already used the budget (or a target below one step's cost)."""
    target = 0.05 if spent_steps == 0 else 1.0
    callback = PrivacyCallback(target_epsilon=target, delta=DELTA)
    if spent_steps:
        history = PrivacyAccountant()
        history.step(PLAN, num_steps=spent_steps)
        callback.load_state_dict({"accountant": history.state_dict()})
    with pytest.raises(UserError, match="budget exhausted"):
        _start(callback)
