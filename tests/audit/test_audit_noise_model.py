"""The model bound of the white-box audit (audit/whitebox/noise_model.py) on the exact one-dimensional model
of a canary's coordinates: it stays below the true ε of a correct mechanism, comes close to it,
and exceeds the claim for the bugs researchers write (half the noise, a doubled record, noise
reused across steps, a contribution that depends on the batch, non-Gaussian noise)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from dpdc_lightning.audit.whitebox.noise_model import (
    Model,
    NoiseTally,
    composed_epsilon,
    model_bound,
    one_step_epsilon,
)

Q, Z, STEPS, DELTA = 0.05, 1.2, 60, 1e-5


def simulate(
    *,
    seed: int,
    noise: float = 1.0,
    effect: float = 1.0,
    reuse: bool = False,
    jitter: float = 0.0,
    uniform: bool = False,
    entries: int = 6000,
) -> dict:
    """``entries`` canaries (half in) over STEPS steps of x = effect·a·b + s·ξ, s = Z (a = 1)."""
    g = torch.Generator().manual_seed(seed)
    tally = NoiseTally(1, STEPS)
    coins = torch.rand(entries, generator=g) < 0.5
    shift = torch.ones(entries, dtype=torch.float64)
    previous, first = None, None
    for step in range(STEPS):
        sampled = coins & (torch.rand(entries, generator=g) < Q)
        if uniform:  # the same variance as N(0, 1)
            xi = (torch.rand(entries, generator=g, dtype=torch.float64) - 0.5) * math.sqrt(12)
        else:
            xi = torch.randn(entries, generator=g, dtype=torch.float64)
        first = xi if first is None else first
        xi = first if reuse else xi
        size = effect + jitter * torch.randn(entries, generator=g, dtype=torch.float64)
        x = size * sampled.double() + Z * noise * xi
        tally.add(0, step, x, sampled=sampled, shift=shift, previous=previous)
        previous = (x, sampled)
    model = Model(sample_rate=Q, noise_std=Z, largest_shift=1.0, delta=DELTA)
    return model_bound(tally.of(0), model, confidence=0.95)


@pytest.fixture(scope="module")
def true_epsilon() -> float:
    return composed_epsilon(np.full(STEPS, Z), q=Q, delta=DELTA)


def test_one_step_epsilon_is_the_accountants_for_one_step():
    # PRV's lower end for one step is within its eps_error (0.01) of the exact hockey-stick value
    exact = one_step_epsilon(0.5, q=0.2, delta=DELTA)
    assert abs(composed_epsilon(np.array([0.5]), q=0.2, delta=DELTA) - exact) < 0.03
    assert one_step_epsilon(0.5, q=0.2, delta=DELTA) > one_step_epsilon(0.6, q=0.2, delta=DELTA)
    assert one_step_epsilon(50.0, q=0.001, delta=DELTA) == 0.0  # δ met at ε = 0 (TV 8e-6)


@pytest.mark.slow
def test_the_model_bound_stays_below_the_true_epsilon_and_comes_close(true_epsilon):
    reports = [simulate(seed=seed) for seed in range(4)]
    for report in reports:
        assert report["epsilon"] <= true_epsilon, report
        assert report["checks"]["rejected"] == [], report["checks"]
    # tight: the measured noise multiplier is within ~2 % of the truth at 360 000 noise entries
    assert min(r["epsilon"] for r in reports) > 0.85 * true_epsilon
    assert all(abs(r["noise_std_measured"] / Z - 1) < 0.01 for r in reports)


@pytest.mark.slow
def test_half_the_noise_and_a_doubled_record_exceed_the_claim(true_epsilon):
    assert simulate(seed=0, noise=0.5)["epsilon"] > 2 * true_epsilon
    doubled = simulate(seed=0, effect=2.0)
    assert doubled["epsilon"] > 2 * true_epsilon and doubled["effect_lower"] > 1.9


@pytest.mark.parametrize(
    ("bug", "check"),
    [({"reuse": True}, "lag"), ({"jitter": 1.0}, "spread"), ({"uniform": True}, "shape")],
)
def test_the_model_checks_reject_releases_that_are_not_the_stated_mechanism(bug, check):
    report = simulate(seed=1, entries=3000, **bug)
    assert check in report["checks"]["rejected"], report["checks"]
    assert simulate(seed=1, entries=3000)["checks"]["rejected"] == []  # the same, correct
