"""privacy.class_sizes=private: the class sizes behind the sample rates are released by the Gaussian
mechanism (L2 sensitivity 1) and that release is composed into the run's total ε."""

from __future__ import annotations

import json

import pytest
import torch

from dpdc_lightning.config import compose
from dpdc_lightning.data import load_dataset
from dpdc_lightning.engine.condense import condense
from dpdc_lightning.engine.planning import plan_run
from dpdc_lightning.engine.resolved import resolve_run
from dpdc_lightning.engine.training import train
from dpdc_lightning.errors import UserError
from dpdc_lightning.methods import DataSpec
from dpdc_lightning.privacy.accounting.analysis import epsilon_from_history
from dpdc_lightning.privacy.mechanisms.counts import release_class_sizes
from dpdc_lightning.privacy.mechanisms.noise import noise_source

SMALL = [
    "method=ndpdc",
    "dataset=toy",
    "model.width=8",
    "model.depth=2",
    "method.ipc=2",
    "method.group_size=4",
    "trainer.enable_progress_bar=false",
]
SPEC = DataSpec(num_classes=4, image_shape=(1, 28, 28), class_sizes=(48, 40, 48, 44))


def _noise(secret: int, *, step: int = 0):
    return noise_source(secret, phase="class_counts", step=step, partition=-1, reproducible=False)


def test_neighbouring_histograms_move_the_release_by_exactly_the_changed_count():
    """Add one record to class 1: with the same noise, only that class's release moves, by 1."""
    before, _ = release_class_sizes((48, 40, 48, 44), noise_multiplier=2.0, noise=_noise(1))
    after, event = release_class_sizes((48, 41, 48, 44), noise_multiplier=2.0, noise=_noise(1))
    difference = torch.tensor(after, dtype=torch.float64) - torch.tensor(
        before, dtype=torch.float64
    )
    assert difference[1].item() == pytest.approx(1.0, abs=1e-4)
    assert difference[[0, 2, 3]].abs().max().item() == 0.0
    assert (event.noise_multiplier, event.sample_rate) == (2.0, 1.0)


def test_release_noise_std_is_the_noise_multiplier():
    draws = torch.tensor(
        [
            release_class_sizes((10_000,) * 50, noise_multiplier=3.0, noise=_noise(7, step=i))[0]
            for i in range(40)
        ]
    )
    noise = draws - 10_000
    assert abs(noise.std().item() - 3.0) < 0.1 * 3.0 and abs(noise.mean().item()) < 0.1 * 3.0


def test_the_plan_counts_the_release_and_stays_within_the_target():
    config = compose(
        [
            *SMALL,
            "method.iterations=30",
            "privacy.target_epsilon=3",
            "privacy.class_sizes=private",
            "privacy.count_epsilon=0.5",
        ]
    )
    plan = plan_run(resolve_run(config), SPEC, noise_seed=11)
    assert plan.released_class_sizes is not None and plan.released_class_sizes != SPEC.class_sizes
    # The rates come from the released sizes only.
    assert plan.sample_rates == tuple(4 / n for n in plan.released_class_sizes)
    # The release alone costs at most its share; release + steps compose to at most the target.
    assert epsilon_from_history([(plan.count_noise_multiplier, 1.0, 1)], delta=1e-5) <= 0.5
    total = epsilon_from_history(
        [(plan.count_noise_multiplier, 1.0, 1), (plan.noise_multiplier, plan.sample_rate, 30)],
        delta=1e-5,
    )
    assert total == pytest.approx(plan.planned_epsilon, rel=1e-12) and 2.9 < total <= 3.0
    # The same target with public sizes needs less noise: the release's share is real.
    public = plan_run(
        resolve_run(compose([*SMALL, "method.iterations=30", "privacy.target_epsilon=3"])), SPEC
    )
    assert public.noise_multiplier < plan.noise_multiplier


def test_a_run_with_private_sizes_reports_the_composed_total(tmp_path):
    config = compose(
        [
            *SMALL,
            "method.iterations=4",
            "privacy.target_epsilon=4",
            "privacy.class_sizes=private",
            "privacy.count_epsilon=0.5",
            f"run_dir={tmp_path / 'run'}",
        ]
    )
    run_dir = train(config)
    report = json.loads((run_dir / "privacy.json").read_text())
    plan = json.loads((run_dir / "plan.json").read_text())
    assert report["steps"] == 4 and report["epsilon"] <= 4.0
    assert report["epsilon"] == pytest.approx(plan["planned_epsilon"], rel=1e-12)
    assert [phase["name"] for phase in report["phases"]] == ["class_counts", "main"]
    assert report["phases"][0]["steps"] == 1 and report["phases"][1]["steps"] == 4
    assert report["class_sizes"]["status"] == "released under differential privacy"
    assert report["class_sizes"]["released"] == plan["released_class_sizes"]
    # The release states its sensitivity and noise std, and its values count towards the truncation bound.
    statement = report["class_sizes"]
    assert (
        statement["sensitivity"] == 1.0
        and statement["noise_std"] == plan["count_noise_multiplier"] > 0
    )
    drawn = report["noise"]["noise_values"] - 4  # one value per released class size
    assert drawn > 0 and drawn % (4 * 4) == 0  # 4 steps x 4 classes x the feature dimension


def test_public_sizes_are_stated_as_an_assumption():
    result = condense(compose([*SMALL, "method.iterations=1"]), load_dataset("toy"))
    assert result.report["class_sizes"]["status"] == "public by assumption"
    assert [phase["name"] for phase in result.report["phases"]] == ["main"]


@pytest.mark.parametrize(
    "tokens, message",
    [
        (["privacy.class_sizes=private"], "count_epsilon"),
        (
            ["privacy.class_sizes=private", "privacy.count_epsilon=2", "privacy.target_epsilon=2"],
            "below",
        ),
        (["privacy.count_epsilon=0.1"], "only with"),
        (["privacy.class_sizes=secret"], "class_sizes"),
    ],
)
def test_bad_class_size_settings_are_one_line_errors(tokens, message):
    with pytest.raises(UserError, match=message):
        compose([*SMALL, *tokens])


def test_a_share_too_small_for_any_release_names_count_epsilon():
    config = compose([*SMALL, "privacy.class_sizes=private", "privacy.count_epsilon=0.05"])
    with pytest.raises(UserError, match="count_epsilon=0.05 cannot pay"):
        plan_run(resolve_run(config), SPEC, noise_seed=0)


def test_a_non_private_method_refuses_private_sizes():
    config = compose(
        ["method=dm", "dataset=toy", "privacy.class_sizes=private", "privacy.count_epsilon=0.1"]
    )
    with pytest.raises(UserError, match="not private"):
        plan_run(resolve_run(config), SPEC, noise_seed=0)
