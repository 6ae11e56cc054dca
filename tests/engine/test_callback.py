"""PrivacyCallback: composes each data step's cost and enforces the run's fixed privacy plan.

Whole runs use NDPDC on the toy data (q = L / N_c = 4 / 48, noise multiplier 1), where a few
steps already cost ε ≈ 2; the unit tests drive the callback with a fake module and trainer.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import dpdc_lightning.engine.training as training
from dpdc_lightning.config import PrivacyConfig, compose
from dpdc_lightning.engine import datamodule as datamodule_module
from dpdc_lightning.engine.method_module import MethodModule
from dpdc_lightning.engine.privacy_callback import PrivacyCallback
from dpdc_lightning.errors import UserError
from dpdc_lightning.privacy.accounting.accountant import PrivacyAccountant
from dpdc_lightning.privacy.accounting.analysis import epsilon_from_history
from dpdc_lightning.privacy.accounting.calibration import max_steps
from dpdc_lightning.privacy.mechanisms.gaussian import PrivacyEvent
from dpdc_lightning.privacy.planning.plan import PrivacyPlan, StepSchedule
from dpdc_lightning.privacy.planning.planner import make_plan

DELTA = 1e-5
RATE = 4 / 48  # group size 4 over the toy's 48 records per class
TARGET = 2.5  # 4 steps cost 2.48, 5 steps 2.59
ITERATIONS = 20


def _train(tmp_path: Path, name: str, *tokens: str) -> tuple[Path, dict]:
    overrides = [
        "method=ndpdc",
        "dataset=toy",
        "model.width=8",
        "model.depth=2",
        "method.ipc=2",
        "method.group_size=4",
        f"method.iterations={ITERATIONS}",
        "trainer.enable_progress_bar=false",
        f"run_dir={tmp_path / name}",
    ]
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
    assert report["noise_multiplier"] == 1.0 and report["sample_rate"] == pytest.approx(
        RATE, rel=1e-12
    )
    # The report's ε is the calculator's value for (noise multiplier, sample rate, steps) ...
    assert report["epsilon"] == pytest.approx(
        epsilon_from_history([(1.0, RATE, steps)], delta=DELTA, accountant="rdp"), rel=1e-12
    )
    # ... it is within the target, and one more step would have exceeded it.
    assert report["epsilon"] <= target
    accountant = PrivacyAccountant()
    accountant.step(event, num_steps=steps)
    assert accountant.get_epsilon(delta=DELTA) == pytest.approx(report["epsilon"], rel=1e-12)
    assert accountant.epsilon_if(event, delta=DELTA) > target


# --------------------------------------------------------------------------- whole runs


def test_calibrate_steps_plans_the_largest_count_within_target(tmp_path):
    _, report = _train(
        tmp_path, "planned", f"privacy.target_epsilon={TARGET}", "privacy.calibrate=steps"
    )
    _check_stopped_at_target(report)
    assert report["target_epsilon"] == TARGET
    assert report["plan"]["data_steps"] == report["steps"]


def test_min_steps_cannot_push_a_run_past_its_plan(tmp_path):
    """trainer.min_steps overrides Lightning's should_stop; the plan must hold anyway."""
    run_dir, report = _train(
        tmp_path,
        "min_steps",
        "privacy.target_epsilon=2",
        "trainer.max_steps=10",
        "trainer.min_steps=60",
    )
    assert report["steps"] == 10 and report["epsilon"] <= 2.0
    plan = json.loads((run_dir / "plan.json").read_text())
    assert plan["data_steps"] == 10 and plan["planned_epsilon"] == report["epsilon"]


def test_a_stream_longer_than_the_plan_is_cut_at_the_plan(tmp_path, monkeypatch):
    """Attack the data stream: it offers 3x the planned steps. The module ends the epoch at the plan."""
    stream_init = datamodule_module._SampleStream.__init__

    def longer(self, module, classes, start, stop):
        stream_init(self, module, classes, start, 3 * stop)

    monkeypatch.setattr(datamodule_module._SampleStream, "__init__", longer)
    monkeypatch.setattr(
        datamodule_module.PrivateDataModule,
        "sample",
        lambda self, step, classes: {
            "step": step,
            "classes": classes,
            "images": [self.class_images(c)[:4] for c in classes],
        },
    )
    _, report = _train(
        tmp_path, "long", f"privacy.target_epsilon={TARGET}", "privacy.calibrate=steps"
    )
    _check_stopped_at_target(report)


def test_the_callback_alone_refuses_a_step_beyond_the_plan(tmp_path, monkeypatch):
    """Attack two layers at once (longer stream, module that never ends the epoch): the callback raises."""
    stream_init = datamodule_module._SampleStream.__init__
    monkeypatch.setattr(
        datamodule_module._SampleStream,
        "__init__",
        lambda self, module, classes, start, stop: stream_init(
            self, module, classes, start, 3 * stop
        ),
    )
    monkeypatch.setattr(
        datamodule_module.PrivateDataModule,
        "sample",
        lambda self, step, classes: {
            "step": step,
            "classes": classes,
            "images": [self.class_images(c)[:4] for c in classes],
        },
    )
    monkeypatch.setattr(MethodModule, "on_train_batch_start", lambda self, batch, batch_idx: None)
    with pytest.raises(RuntimeError, match="beyond the plan"):
        _train(
            tmp_path,
            "attacked",
            f"privacy.target_epsilon={TARGET}",
            "privacy.calibrate=steps",
            "trainer.min_steps=1000",
        )


def test_checkpoints_hold_the_plan_and_the_history(tmp_path):
    run_dir, report = _train(
        tmp_path,
        "ckpt",
        f"privacy.target_epsilon={TARGET}",
        "privacy.calibrate=steps",
        "method.checkpoint_every=1",
    )
    # The checkpoint (loadable without pickle) holds the callback's state: restoring it gives the same ε.
    checkpoint = torch.load(
        run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True
    )
    states = [state for key, state in checkpoint["callbacks"].items() if "PrivacyCallback" in key]
    assert len(states) == 1
    plan = PrivacyPlan.from_dict(json.loads((run_dir / "plan.json").read_text()))
    restored = PrivacyCallback(plan)
    restored.load_state_dict(states[0])
    assert restored.accountant.get_epsilon(delta=DELTA) == report["epsilon"]
    assert restored.accountant.total_steps == report["steps"]


def test_secure_noise_is_the_default_and_reproducible_noise_is_flagged(tmp_path):
    assert PrivacyConfig().reproducible_noise is False
    assert compose(["method=ndpdc"]).privacy.reproducible_noise is False
    _, secure = _train(tmp_path, "secure", "method.iterations=2")
    assert secure["noise_mode"] == "secure" and "warning" not in secure
    _, reproducible = _train(
        tmp_path, "reproducible", "method.iterations=2", "privacy.reproducible_noise=true"
    )
    assert reproducible["noise_mode"] == "reproducible"
    assert "NOT private" in reproducible["warning"]
    assert secure["epsilon"] == reproducible["epsilon"] > 0


# --------------------------------------------------------------------------- the callback alone


PLAN = PrivacyEvent(noise_multiplier=1.0, sample_rate=RATE)
SCHEDULE = StepSchedule(
    private=True,
    sampling="per_class_poisson",
    sample_size=4,
    data_steps=ITERATIONS,
    default_noise_multiplier=1.0,
)


def _plan(target=None, *, calibrate="steps", steps=ITERATIONS, free=0, private=True) -> PrivacyPlan:
    schedule = StepSchedule(
        private=private,
        sampling="per_class_poisson",
        sample_size=4,
        data_steps=steps,
        free_steps=free,
        default_noise_multiplier=1.0 if private else None,
    )
    return make_plan(
        schedule,
        class_sizes=(48,) * 4,
        method="test",
        noise_multiplier=None,
        target_epsilon=target,
        delta=DELTA,
        calibrate=calibrate,
        accountant="rdp",
    )


def test_a_generous_target_never_plans_more_data_steps_than_the_method_asks():
    """calibrate=steps cuts the data steps to what the target allows and never adds one."""
    plan = _plan(1000.0, calibrate="steps")
    assert plan.data_steps == ITERATIONS and plan.planned_epsilon < 1000.0


@pytest.mark.parametrize("cap, data_steps, free_steps", [(10, 8, 2), (6, 6, 0), (20, 8, 5)])
def test_a_step_cap_takes_the_data_steps_first_then_the_free_ones(cap, data_steps, free_steps):
    schedule = StepSchedule(
        private=True,
        sampling="per_class_poisson",
        sample_size=4,
        data_steps=8,
        free_steps=5,
        default_noise_multiplier=1.0,
    )
    plan = make_plan(
        schedule,
        class_sizes=(48,) * 4,
        method="test",
        noise_multiplier=None,
        target_epsilon=None,
        delta=DELTA,
        calibrate="sigma",
        accountant="rdp",
        step_cap=cap,
    )
    assert (plan.data_steps, plan.free_steps) == (data_steps, free_steps)


class FakeModule:
    """What the callback uses of a method: the events of a step, and log()."""

    def __init__(self):
        self.events, self.logged = [], {}

    def pop_events(self):
        events, self.events = self.events, []
        return events

    def log(self, name, value, **kwargs):
        self.logged[name] = value


def _start(callback: PrivacyCallback) -> tuple[SimpleNamespace, FakeModule]:
    trainer, module = SimpleNamespace(should_stop=False, step=0), FakeModule()
    callback.on_fit_start(trainer, module)
    return trainer, module


def _step(callback, trainer, module, events) -> None:
    batch = {"step": trainer.step}
    callback.on_train_batch_start(trainer, module, batch, 0)
    module.events = list(events)
    callback.on_train_batch_end(trainer, module, None, batch, 0)
    trainer.step += 1


def _run_until_stop(callback, trainer, module, limit: int = 1000) -> int:
    steps = 0
    while not trainer.should_stop and steps < limit:
        _step(callback, trainer, module, [(c, PLAN) for c in range(4)])
        steps += 1
    return steps


def test_callback_stops_after_the_plans_last_step_within_the_target():
    callback = PrivacyCallback(_plan(TARGET))
    trainer, module = _start(callback)
    steps = _run_until_stop(callback, trainer, module)
    assert steps == _allowed_steps()
    assert callback.epsilon == module.logged["epsilon"] <= TARGET
    assert callback.accountant.epsilon_if(PLAN, delta=DELTA) > TARGET
    with pytest.raises(RuntimeError, match="beyond the plan"):  # one more data step is refused
        _step(callback, trainer, module, [(0, PLAN)])


def test_state_dict_round_trip_keeps_epsilon_exact_and_resumes_to_the_same_stop():
    plan = _plan(TARGET)
    uninterrupted = PrivacyCallback(plan)
    trainer, module = _start(uninterrupted)
    total = _run_until_stop(uninterrupted, trainer, module)

    first = PrivacyCallback(plan)
    trainer, module = _start(first)
    for _ in range(total - 1):
        _step(first, trainer, module, [(0, PLAN)])
    assert not trainer.should_stop
    state = json.loads(json.dumps(first.state_dict()))  # checkpoints must hold plain types
    resumed = PrivacyCallback(plan)
    resumed.load_state_dict(state)
    assert resumed.accountant.get_epsilon(delta=DELTA) == first.accountant.get_epsilon(delta=DELTA)
    resumed_trainer, module = _start(resumed)
    resumed_trainer.step = trainer.step
    assert _run_until_stop(resumed, resumed_trainer, module) == 1
    resumed.on_train_end(trainer, module)
    uninterrupted.on_train_end(trainer, module)
    assert resumed.epsilon == uninterrupted.epsilon
    assert resumed.accountant.history == uninterrupted.accountant.history


def test_a_checkpoint_of_another_plan_is_refused():
    first = PrivacyCallback(_plan(TARGET))
    with pytest.raises(UserError, match="another privacy plan"):
        PrivacyCallback(_plan(TARGET, calibrate="sigma")).load_state_dict(first.state_dict())


@pytest.mark.parametrize(
    "events, message",
    [
        ([], "no privacy event"),
        ([(0, PLAN), (0, PLAN)], "same data twice"),
        ([(-1, PLAN), (0, PLAN)], "same data twice"),
        ([(0, PLAN), (1, PrivacyEvent(noise_multiplier=0.9, sample_rate=RATE))], "costlier"),
        ([(0, PrivacyEvent(noise_multiplier=1.0, sample_rate=RATE * 1.01))], "costlier"),
    ],
)
def test_a_step_outside_the_plan_raises(events, message):
    callback = PrivacyCallback(_plan())
    trainer, module = _start(callback)
    _step(callback, trainer, module, [(0, PLAN), (1, PLAN)])  # a valid step first
    with pytest.raises(RuntimeError, match=message):
        _step(callback, trainer, module, events)
    assert callback.accountant.total_steps == 1  # the bad step was not silently accounted


def test_a_cheaper_event_is_accounted_at_the_planned_cost():
    callback = PrivacyCallback(_plan())
    trainer, module = _start(callback)
    _step(
        callback, trainer, module, [(0, PrivacyEvent(noise_multiplier=3.0, sample_rate=RATE / 2))]
    )
    assert callback.accountant.history == [(PLAN.noise_multiplier, PLAN.sample_rate, 1)]


def test_a_non_private_method_spending_events_raises():
    callback = PrivacyCallback(_plan(private=False))
    trainer, module = _start(callback)
    _step(callback, trainer, module, [])
    assert callback.accountant.total_steps == 0 and callback.epsilon is None
    with pytest.raises(RuntimeError, match="non-private"):
        _step(callback, trainer, module, [(0, PLAN)])


def test_free_steps_spend_nothing_and_may_not_spend():
    callback = PrivacyCallback(_plan(steps=2, free=3))
    trainer, module = _start(callback)
    for _ in range(2):
        _step(callback, trainer, module, [(0, PLAN)])
    epsilon = callback.epsilon
    _step(callback, trainer, module, [])  # a free step
    assert (
        callback.accountant.total_steps == 2
        and callback.epsilon == epsilon
        and not trainer.should_stop
    )
    with pytest.raises(RuntimeError, match="free step"):
        _step(callback, trainer, module, [(0, PLAN)])


@pytest.mark.parametrize("spent_steps", [0, 10_000])
def test_a_plan_beyond_the_target_is_refused_before_any_step(spent_steps):
    """A hand-made plan whose steps exceed its target, or a restored history that used the budget."""
    if spent_steps == 0:
        plan = dataclasses_replace(_plan(TARGET), data_steps=ITERATIONS)
        callback = PrivacyCallback(plan)
    else:
        plan = _plan(TARGET)
        callback = PrivacyCallback(plan)
        history = PrivacyAccountant()
        history.step(PLAN, num_steps=spent_steps)
        callback.accountant.load_state_dict(history.state_dict())
    with pytest.raises((UserError, RuntimeError), match="budget|accountant holds"):
        _start(callback)


def dataclasses_replace(plan: PrivacyPlan, **changes) -> PrivacyPlan:
    import dataclasses

    return dataclasses.replace(plan, **changes)
