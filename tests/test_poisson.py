"""Poisson subsampling: the inclusion law the privacy accounting assumes."""

from __future__ import annotations

import math

import pytest
import torch

from dpdc_lightning.data import poisson_sample, sample_without_replacement
from dpdc_lightning.seeding import derive_generator


def _indicators(indices: torch.Tensor, num_records: int) -> torch.Tensor:
    mask = torch.zeros(num_records)
    mask[indices] = 1.0
    return mask


def test_output_is_sorted_distinct_int64_in_range():
    indices = poisson_sample(500, sample_rate=0.3, generator=derive_generator(1, "t"))
    assert indices.dtype == torch.int64 and indices.dim() == 1
    assert torch.all(indices[1:] > indices[:-1])
    assert indices.min() >= 0 and indices.max() < 500


def test_sample_size_mean_and_variance_are_binomial():
    n, q, draws = 1000, 0.05, 2000
    generator = derive_generator(2, "sizes")
    sizes = torch.tensor(
        [poisson_sample(n, sample_rate=q, generator=generator).numel() for _ in range(draws)],
        dtype=torch.float64,
    )
    mean, var = n * q, n * q * (1 - q)
    assert abs(sizes.mean().item() - mean) < 4 * math.sqrt(var / draws)
    # Relative standard error of a sample variance is about sqrt(2 / draws) for near-normal sizes.
    assert abs(sizes.var().item() / var - 1) < 4 * math.sqrt(2 / draws)


def test_each_record_is_included_with_probability_q():
    n, q, draws = 200, 0.2, 2000
    generator = derive_generator(3, "per-record")
    counts = torch.zeros(n)
    for _ in range(draws):
        counts += _indicators(poisson_sample(n, sample_rate=q, generator=generator), n)
    frequency = counts / draws
    standard_error = math.sqrt(q * (1 - q) / draws)
    assert (frequency - q).abs().max() < 5 * standard_error


def test_successive_steps_are_independent():
    n, q = 5000, 0.3
    bound = 5 / math.sqrt(n)  # Pearson correlation of independent indicators is ~N(0, 1/n)
    for step in range(10):
        first = _indicators(
            poisson_sample(n, sample_rate=q, generator=derive_generator(4, "poisson", step)), n
        )
        second = _indicators(
            poisson_sample(n, sample_rate=q, generator=derive_generator(4, "poisson", step + 1)), n
        )
        correlation = torch.corrcoef(torch.stack([first, second]))[0, 1].item()
        assert abs(correlation) < bound
    # Two successive draws from one generator are independent as well.
    generator = derive_generator(4, "one-stream")
    first = _indicators(poisson_sample(n, sample_rate=q, generator=generator), n)
    second = _indicators(poisson_sample(n, sample_rate=q, generator=generator), n)
    assert abs(torch.corrcoef(torch.stack([first, second]))[0, 1].item()) < bound


def test_empty_samples_occur_with_the_right_probability():
    n, q, draws = 10, 0.05, 20000
    generator = derive_generator(5, "empty")
    empty = sum(
        poisson_sample(n, sample_rate=q, generator=generator).numel() == 0 for _ in range(draws)
    )
    expected = (1 - q) ** n
    assert abs(empty / draws - expected) < 4 * math.sqrt(expected * (1 - expected) / draws)


def test_equal_seeds_give_equal_samples_and_global_rng_is_untouched():
    state = torch.get_rng_state()
    a = poisson_sample(1000, sample_rate=0.1, generator=derive_generator(6, "same"))
    b = poisson_sample(1000, sample_rate=0.1, generator=derive_generator(6, "same"))
    c = poisson_sample(1000, sample_rate=0.1, generator=derive_generator(6, "other"))
    w1 = sample_without_replacement(1000, size=50, generator=derive_generator(6, "same"))
    w2 = sample_without_replacement(1000, size=50, generator=derive_generator(6, "same"))
    assert torch.equal(a, b) and torch.equal(w1, w2)
    assert not torch.equal(a, c)
    assert torch.equal(torch.get_rng_state(), state)


def test_rate_one_includes_everything_and_zero_records_is_empty():
    generator = derive_generator(7, "edges")
    assert torch.equal(poisson_sample(37, sample_rate=1.0, generator=generator), torch.arange(37))
    assert poisson_sample(0, sample_rate=0.5, generator=generator).numel() == 0


@pytest.mark.parametrize("rate", [0.0, -0.1, 1.5, float("nan"), float("inf")])
def test_invalid_rate_is_value_error(rate):
    with pytest.raises(ValueError, match="sample_rate"):
        poisson_sample(10, sample_rate=rate, generator=torch.Generator())


def test_invalid_counts_and_generator_are_value_errors():
    with pytest.raises(ValueError):
        poisson_sample(-1, sample_rate=0.5, generator=torch.Generator())
    with pytest.raises(ValueError):
        poisson_sample(10, sample_rate=0.5, generator=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        sample_without_replacement(10, size=-1, generator=torch.Generator())


def test_sample_without_replacement_is_fixed_size_distinct_and_uniform():
    generator = derive_generator(8, "wor")
    capped = sample_without_replacement(5, size=9, generator=generator)
    assert torch.equal(capped, torch.arange(5))
    n, size, draws = 20, 5, 4000
    counts = torch.zeros(n)
    for _ in range(draws):
        sample = sample_without_replacement(n, size=size, generator=generator)
        assert sample.numel() == size and torch.all(sample[1:] > sample[:-1])
        counts += _indicators(sample, n)
    p = size / n
    assert (counts / draws - p).abs().max() < 5 * math.sqrt(p * (1 - p) / draws)
