"""The paper presets (experiment=...) plan exactly the DPDC paper's privacy cost on FashionMNIST
(6000 training images per class), without loading any data."""

from __future__ import annotations

import pytest

from dpdc_lightning.config import compose
from dpdc_lightning.engine.planning import plan_run
from dpdc_lightning.engine.resolved import resolve_run
from dpdc_lightning.methods import DataSpec
from dpdc_lightning.privacy.accounting.analysis import epsilon_from_history

FASHION_MNIST = DataSpec(num_classes=10, image_shape=(1, 28, 28), class_sizes=(6000,) * 10)


def _planned_epsilon(experiment: str) -> tuple[float, float, int]:
    config = compose([f"experiment={experiment}"])
    plan = plan_run(resolve_run(config), FASHION_MNIST)
    epsilon = epsilon_from_history(
        [(plan.noise_multiplier, plan.sample_rate, plan.data_steps)], delta=config.privacy.delta
    )
    assert plan.planned_epsilon == epsilon  # the plan states the ε the calculator gives
    return epsilon, plan.noise_multiplier, plan.data_steps


@pytest.mark.parametrize(
    "experiment, epsilon, steps", [("ndpdc_paper", 5.4427, 10000), ("ldpdc_paper", 1.0588, 50)]
)
def test_paper_presets_cost_the_papers_epsilon(experiment, epsilon, steps):
    measured, sigma, planned_steps = _planned_epsilon(experiment)
    assert (sigma, planned_steps) == (1.0, steps)
    assert measured == pytest.approx(
        epsilon, abs=1e-4
    )  # the paper prints ε to 4 decimals: one unit of the last


@pytest.mark.parametrize("experiment", ["ndpdc_eps1", "ldpdc_eps1"])
def test_epsilon_one_presets_calibrate_to_at_most_one(experiment):
    measured, sigma, _ = _planned_epsilon(experiment)
    assert 0.99 < measured <= 1.0
    assert sigma > 1.0
