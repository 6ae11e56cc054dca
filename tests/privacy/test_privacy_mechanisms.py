"""The Gaussian mechanism: clipping bounds the sensitivity, the noise has the claimed std."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest
import torch

from dpdc_lightning.errors import UserError
from dpdc_lightning.privacy.mechanisms.gaussian import (
    PrivacyEvent,
    clip_rows,
    gaussian_noise_like,
    gaussian_sum,
    noisy_clipped_mean,
    noisy_clipped_sum,
)
from dpdc_lightning.privacy.mechanisms.noise import KeyedNoise
from dpdc_lightning.seeding import derive_generator


def _noise(secret: int, step: int = 0) -> KeyedNoise:
    return KeyedNoise(secret, phase="test", step=step, partition=0)


def _row_norms(x: torch.Tensor) -> torch.Tensor:
    return torch.linalg.vector_norm(x.flatten(1).double(), dim=1)


def _mixed_rows(generator: torch.Generator) -> torch.Tensor:
    """Rows of norms far below, near, and far above 1, plus a zero row; shape [n, 3, 4]."""
    directions = torch.randn(40, 3, 4, generator=generator)
    directions = directions / _row_norms(directions).float().reshape(-1, 1, 1)
    scales = torch.cat(
        [torch.tensor([0.0, 1e-8, 0.999, 1.0, 1.001, 1e6]), torch.rand(34, generator=generator) * 5]
    )
    return directions * scales.reshape(-1, 1, 1)


# --- events --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "noise_multiplier, sample_rate",
    [
        (0.0, 0.1),
        (-1.0, 0.1),
        (math.inf, 0.1),
        (math.nan, 0.1),
        (1.0, 0.0),
        (1.0, -0.1),
        (1.0, 1.5),
        (1.0, math.nan),
    ],
)
def test_event_rejects_invalid_values(noise_multiplier, sample_rate):
    with pytest.raises(UserError):
        PrivacyEvent(noise_multiplier=noise_multiplier, sample_rate=sample_rate)


def test_event_is_frozen_plain_floats_and_accepts_full_sampling():
    event = PrivacyEvent(noise_multiplier=torch.tensor(2.0).item(), sample_rate=1)
    assert type(event.noise_multiplier) is float and type(event.sample_rate) is float
    assert event == PrivacyEvent(noise_multiplier=2.0, sample_rate=1.0)
    with pytest.raises(AttributeError):
        event.noise_multiplier = 0.5  # type: ignore[misc]


# --- clipping ------------------------------------------------------------------------------------


@pytest.mark.parametrize("max_norm", [0.1, 1.0, 3.0])
def test_clipped_rows_are_within_bound_and_short_rows_untouched(max_norm):
    rows = _mixed_rows(derive_generator(0, "clip", str(max_norm)))
    clipped = clip_rows(rows, max_norm=max_norm)
    norms_before, norms_after = _row_norms(rows), _row_norms(clipped)
    assert clipped.shape == rows.shape and clipped.dtype == rows.dtype
    assert torch.all(norms_after <= max_norm * (1 + 1e-6))
    short = norms_before <= max_norm * (1 - 1e-6)
    assert short.any() and torch.equal(clipped[short], rows[short])
    long = norms_before > max_norm * (1 + 1e-6)
    assert long.any()
    assert torch.allclose(
        norms_after[long], torch.full_like(norms_after[long], max_norm), rtol=1e-5
    )
    # Clipping only rescales: directions of long rows are kept.
    cosine = (clipped[long] * rows[long]).flatten(1).sum(1).double() / (
        norms_after[long] * norms_before[long]
    )
    assert torch.allclose(cosine, torch.ones_like(cosine), atol=1e-5)


def test_clip_keeps_float64_and_has_finite_gradients_at_zero_rows():
    rows = torch.zeros(3, 5, dtype=torch.float64)
    rows[1] = 10.0
    rows.requires_grad_(True)
    clipped = clip_rows(rows, max_norm=1.0)
    assert clipped.dtype == torch.float64
    clipped.sum().backward()
    assert torch.isfinite(rows.grad).all()
    assert torch.equal(rows.grad[0], torch.ones(5, dtype=torch.float64))  # identity below the bound


def test_clip_handles_empty_batches_and_scalar_rows():
    assert clip_rows(torch.empty(0, 3, 4), max_norm=1.0).shape == (0, 3, 4)
    assert torch.equal(
        clip_rows(torch.tensor([-5.0, 0.5]), max_norm=1.0), torch.tensor([-1.0, 0.5])
    )


def test_clip_rejects_bad_bound_and_scalars():
    with pytest.raises(UserError):
        clip_rows(torch.ones(2, 2), max_norm=0.0)
    with pytest.raises(UserError):
        clip_rows(torch.ones(2, 2), max_norm=math.inf)
    with pytest.raises(ValueError):
        clip_rows(torch.tensor(3.0), max_norm=1.0)


@pytest.mark.parametrize("max_norm", [0.5, 2.0])
def test_neighbouring_datasets_move_the_clipped_sum_by_at_most_the_sensitivity(max_norm):
    generator = derive_generator(1, "neighbours", str(max_norm))
    data = _mixed_rows(generator)
    base = clip_rows(data, max_norm=max_norm).sum(0)
    worst = [
        torch.full((1, 3, 4), 1e9),
        torch.full((1, 3, 4), -1e9),
        data[:1] * 1e4,
        torch.randn(1, 3, 4, generator=generator) * 100,
    ]
    shifts = []
    for record in worst:
        added = clip_rows(torch.cat([data, record]), max_norm=max_norm).sum(0)
        shifts.append(torch.linalg.vector_norm((added - base).double()).item())
    for index in range(len(data)):  # remove-one
        removed = clip_rows(torch.cat([data[:index], data[index + 1 :]]), max_norm=max_norm).sum(0)
        shifts.append(torch.linalg.vector_norm((removed - base).double()).item())
    assert max(shifts) <= max_norm * (1 + 1e-5)
    assert max(shifts) >= max_norm * (
        1 - 1e-5
    )  # the bound is attained: the sensitivity is not overstated


# --- noise ---------------------------------------------------------------------------------------


def test_gaussian_sum_noise_std_is_sensitivity_times_noise_multiplier():
    draws = 200_000
    sensitivity, noise_multiplier = 0.7, 1.3  # distinct so that std = either factor alone fails
    clipped_sum = torch.full((draws,), 5.0, dtype=torch.float64)
    released, event = gaussian_sum(
        clipped_sum,
        sensitivity=sensitivity,
        noise_multiplier=noise_multiplier,
        sample_rate=0.25,
        noise=_noise(2),
    )
    assert released.dtype == torch.float32 and released.shape == clipped_sum.shape
    assert event == PrivacyEvent(noise_multiplier=noise_multiplier, sample_rate=0.25)
    noise = released.double() - 5.0
    std = sensitivity * noise_multiplier
    assert abs(noise.std().item() / std - 1) < 5 / math.sqrt(2 * draws)
    assert abs(noise.mean().item()) < 5 * std / math.sqrt(draws)


def test_noise_depends_only_on_the_key_and_is_float64_on_the_cpu():
    value = torch.zeros(1000, dtype=torch.float64)
    first = gaussian_noise_like(value, std=1.0, noise=_noise(3))
    again = gaussian_noise_like(value.float(), std=1.0, noise=_noise(3))
    other = gaussian_noise_like(value, std=1.0, noise=_noise(4))
    assert first.dtype == torch.float64 and first.device.type == "cpu"
    assert torch.equal(first, again)
    assert not torch.allclose(first, other)
    with pytest.raises(UserError):
        gaussian_noise_like(value, std=0.0, noise=_noise(3))


def test_a_torch_generator_is_refused_as_noise():
    # The old float32 Mersenne-Twister path must not come back through a stale call site.
    with pytest.raises(TypeError, match="NoiseStream"):
        noisy_clipped_sum(
            torch.ones(2, 3),
            max_norm=1.0,
            noise_multiplier=1.0,
            sample_rate=0.5,
            noise=derive_generator(0, "noise"),
        )


def test_noisy_clipped_sum_is_clipped_sum_plus_noise_of_std_max_norm_times_multiplier():
    rows = _mixed_rows(derive_generator(5, "rows"))
    max_norm, noise_multiplier = 2.0, 0.8
    released, event = noisy_clipped_sum(
        rows, max_norm=max_norm, noise_multiplier=noise_multiplier, sample_rate=0.1, noise=_noise(5)
    )
    expected_noise = gaussian_noise_like(rows[0], std=max_norm * noise_multiplier, noise=_noise(5))
    # The release is the float64 clipped sum plus the float64 noise, rounded to float32 once.
    expected = (clip_rows(rows.double(), max_norm=max_norm).sum(0) + expected_noise).float()
    assert event == PrivacyEvent(noise_multiplier=noise_multiplier, sample_rate=0.1)
    assert released.dtype == torch.float32 and torch.equal(released, expected)
    # The huge row (norm 1e6) contributed at most max_norm: without clipping the sum would be far off.
    assert torch.linalg.vector_norm(released.double() - expected_noise) <= len(rows) * max_norm * (
        1 + 1e-5
    )


def test_empty_poisson_sample_releases_pure_noise_of_the_row_shape():
    empty = torch.empty(0, 3, 4)
    released, event = noisy_clipped_sum(
        empty, max_norm=1.0, noise_multiplier=2.0, sample_rate=0.01, noise=_noise(6)
    )
    noise = gaussian_noise_like(torch.zeros(3, 4), std=2.0, noise=_noise(6))
    assert released.shape == (3, 4)
    assert torch.equal(released, noise.float()) and noise.abs().sum() > 0
    assert event.sample_rate == 0.01


def test_noisy_clipped_mean_divides_by_the_expected_size_not_the_realised_one():
    rows = torch.ones(7, 4) * 0.1  # realised size 7, inside the bound
    expected_size = 50.0
    kwargs = dict(max_norm=1.0, noise_multiplier=1.0, sample_rate=50 / 6000)
    mean, event = noisy_clipped_mean(rows, expected_size=expected_size, noise=_noise(7), **kwargs)
    total, _ = noisy_clipped_sum(rows, noise=_noise(7), **kwargs)
    assert torch.allclose(mean, total / expected_size)
    assert not torch.allclose(mean, total / len(rows))
    assert event.noise_multiplier == 1.0
    empty_mean, _ = noisy_clipped_mean(
        torch.empty(0, 4), expected_size=expected_size, noise=_noise(7), **kwargs
    )
    assert torch.isfinite(empty_mean).all()
    with pytest.raises(UserError):
        noisy_clipped_mean(rows, expected_size=0.0, noise=_noise(7), **kwargs)


def test_mechanisms_never_import_the_accountant_or_touch_global_rng():
    source = Path(
        __import__("dpdc_lightning.privacy.mechanisms.gaussian", fromlist=["x"]).__file__
    ).read_text()
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module or "")
    assert not any(
        "accounting" in name or "analysis" in name or "opacus" in name for name in imported
    )
    state = torch.random.get_rng_state()
    noisy_clipped_sum(
        torch.ones(2, 3), max_norm=1.0, noise_multiplier=1.0, sample_rate=0.5, noise=_noise(8)
    )
    assert torch.equal(state, torch.random.get_rng_state())
