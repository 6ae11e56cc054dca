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


# --------------------------------------------------------------------------- the law, in full
#
# poisson_sample draws the size K ~ Binomial(N, q) and then a uniform K-subset (privacy/mechanisms/sampling.py
# proves that this is the law of N independent Bernoulli(q) inclusions). The check below tests that
# law directly on DRAWS independent samples, each statistic against its exact null distribution:
# a record's inclusion count, a pair's joint count, the count of samples of size k, and the total
# number of inclusions are each Binomial(DRAWS (x N), p) with p = q, q^2, C(N,k) q^k (1-q)^(N-k) and q.
# The threshold of each is Bernstein's inequality at a false-alarm probability of ALPHA / m for m
# statistics (union bound), so a correct sampler fails with probability below ALPHA in all; the
# mutants below show that the same thresholds catch a biased sampler.

ALPHA = 1e-6
DRAWS = 10_000


def _bernstein(p: float, *, trials: int, statistics: int) -> float:
    """t with P(|X / trials - p| >= t) <= ALPHA / (3 statistics) for X ~ Binomial(trials, p):
    Bernstein, 2 exp(-trials t^2 / (2 p (1 - p) + 2 t / 3)), solved for t (three families of
    statistics share ALPHA, the total being one more)."""
    log_term = math.log(2 * 3 * statistics / ALPHA)
    linear = 2 * log_term / 3
    return (linear + math.sqrt(linear**2 + 8 * trials * p * (1 - p) * log_term)) / (2 * trials)


def _law_problems(sampler, n: int, q: float, seed: int) -> list[str]:
    generator = derive_generator(seed, "law", n)
    samples = [sampler(n, sample_rate=q, generator=generator) for _ in range(DRAWS)]
    rows = torch.repeat_interleave(torch.tensor([len(picks) for picks in samples]))
    included = torch.zeros(DRAWS, n, dtype=torch.float64)
    included.index_put_(
        (rows, torch.cat(samples)), torch.ones(len(rows), dtype=torch.float64), accumulate=True
    )
    if bool((included > 1).any()):
        return ["a sample repeats a record"]
    problems = []
    frequency = included.mean(0)
    bound = _bernstein(q, trials=DRAWS, statistics=n)
    if (frequency - q).abs().max() >= bound:
        problems.append(f"a record's frequency is off by {(frequency - q).abs().max():.4f}")
    total = included.mean()
    if abs(total - q) >= _bernstein(q, trials=DRAWS * n, statistics=1):
        problems.append(f"the mean sample size is {float(total) * n:.3f}, not {n * q}")
    joint = (included.T @ included / DRAWS)[torch.triu_indices(n, n, 1).unbind()]
    bound = _bernstein(q * q, trials=DRAWS, statistics=n * (n - 1) // 2)
    if (joint - q * q).abs().max() >= bound:
        problems.append(f"a pair's joint frequency is off by {(joint - q * q).abs().max():.4f}")
    sizes = torch.bincount(included.sum(1).long(), minlength=n + 1).double() / DRAWS
    pmf = torch.tensor([math.comb(n, k) * q**k * (1 - q) ** (n - k) for k in range(n + 1)])
    bounds = torch.tensor([_bernstein(float(p), trials=DRAWS, statistics=n + 1) for p in pmf])
    if bool(((sizes - pmf).abs() >= bounds).any()):
        problems.append("the sample size is not Binomial(N, q)")
    return problems


# N = 20 at q = 1/4 draws its subsets mostly by permutation (K >= N / 8), N = 80 at q = 1/10 mostly
# by rejection of repeated indices.
LAWS = [(20, 0.25), (80, 0.1)]


@pytest.mark.parametrize("n, q", LAWS)
def test_poisson_sample_has_the_law_of_independent_inclusions(n, q):
    assert _law_problems(poisson_sample, n, q, seed=11) == []


def _count_plus_one(n, *, sample_rate, generator):
    size = min(
        n,
        int(torch.binomial(torch.tensor(float(n)), torch.tensor(sample_rate), generator=generator))
        + 1,
    )
    return torch.randperm(n, generator=generator)[:size].sort().values


def _with_replacement(n, *, sample_rate, generator):
    size = int(
        torch.binomial(torch.tensor(float(n)), torch.tensor(sample_rate), generator=generator)
    )
    return torch.randint(n, (size,), generator=generator).unique()


def _contiguous(n, *, sample_rate, generator):
    """The right size and the right marginals, but a run of neighbouring records."""
    size = int(
        torch.binomial(torch.tensor(float(n)), torch.tensor(sample_rate), generator=generator)
    )
    start = int(torch.randint(n, (1,), generator=generator))
    return ((start + torch.arange(size)) % n).sort().values


def _fixed_size(n, *, sample_rate, generator):
    return torch.randperm(n, generator=generator)[: round(n * sample_rate)].sort().values


@pytest.mark.slow  # 8 x 10,000 draws: seconds each on a loaded CPU
@pytest.mark.parametrize("n, q", LAWS)
@pytest.mark.parametrize("biased", [_count_plus_one, _with_replacement, _contiguous, _fixed_size])
def test_the_law_check_rejects_a_biased_sampler(biased, n, q):
    assert _law_problems(biased, n, q, seed=11) != []


def test_a_sample_costs_its_size_not_the_number_of_records():
    """10^15 records at q = 10^-14: one uniform per record would need 8 PB; the count and subset
    draw touch about 10 indices."""
    picks = poisson_sample(10**15, sample_rate=1e-14, generator=derive_generator(12, "huge"))
    assert picks.numel() < 60 and bool((picks < 10**15).all())
    assert torch.all(picks[1:] > picks[:-1])
