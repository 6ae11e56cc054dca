"""Record sampling: Poisson subsampling for private steps, fixed-size sampling for baselines.

PRIVACY-CRITICAL. The privacy accountant (Opacus' RDP / PRV accountants) analyses each step as the
*Poisson-subsampled* Gaussian mechanism (Abadi et al. 2016, "Deep Learning with Differential
Privacy"; Mironov, Talwar & Zhang 2019, "Renyi Differential Privacy of the Sampled Gaussian
Mechanism"): every record is included independently with probability q, so the batch size itself
is random (Binomial(N, q)) and may be zero. Its privacy amplification ("q" in the accounting) holds
only for that sampling. A fixed-size sample, shuffled epochs or sampling with replacement do NOT
match the accounting; use ``sample_without_replacement`` only in non-private baselines.

How a Poisson sample is drawn, in time proportional to the expected sample N q rather than to N
(one uniform per record costs O(N) a step, whatever the sample): first the size K ~ Binomial(N, q),
then K distinct records chosen uniformly among the C(N, K) subsets of that size. This is the same
distribution as N independent Bernoulli(q) inclusions. Proof: under independent inclusions a given
set A of k records is drawn with probability q^k (1 - q)^(N - k); the size of the sample is
Binomial(N, q), P(K = k) = C(N, k) q^k (1 - q)^(N - k), and given K = k every k-subset has the same
probability (q^k (1 - q)^(N - k) does not depend on which k records), 1 / C(N, k). Drawing K from
that law and then a uniform k-subset therefore gives each A the probability
C(N, k) q^k (1 - q)^(N - k) / C(N, k) = q^k (1 - q)^(N - k), exactly the Bernoulli law, so every
record is included with probability q, independently of every other record.

The uniform k-subset (``_uniform_subset``): for k >= N / 8, the first k of a random permutation
(O(N) = O(8 k)); otherwise, repeatedly draw as many uniform indices as are still missing and keep
the distinct ones (a draw can repeat a record with probability below 1/8, so few rounds are needed,
O(k log k) in all). That procedure treats the N labels symmetrically: relabelling the records by
any permutation leaves the law of the uniform draws, hence of the final set, unchanged, and the
permutations reach every k-subset from any other, so all k-subsets are equally likely. Its set
never exceeds k, since each round draws only the missing number.

Every draw uses the caller's ``torch.Generator`` (never torch's global RNG), so a step's sample
depends only on the generator the caller derived for it (e.g. from (seed, "poisson", step, class)):
the same key gives the same records on resume and on every process. The realised size K is a
private quantity: callers use the indices and never report their number.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

# Below this share of the records a subset is drawn by rejection (O(k)), above by a permutation.
_PERMUTATION_SHARE = 1 / 8


def _check_count(num_records: int) -> int:
    if isinstance(num_records, bool) or not isinstance(num_records, int) or num_records < 0:
        raise ValueError(f"num_records must be a non-negative int, got {num_records!r}")
    return num_records


def _check_generator(generator: torch.Generator) -> None:
    if not isinstance(generator, torch.Generator):
        raise ValueError(f"generator must be a torch.Generator, got {type(generator).__name__}")


def binomial_count(num_records: int, *, sample_rate: float, generator: torch.Generator) -> int:
    """K ~ Binomial(num_records, sample_rate) from ``generator`` (torch's exact samplers: inversion
    by geometric waiting times below 10 expected successes, BTRS rejection above; float64 counts are
    exact integers up to 2^53)."""
    count = torch.tensor(float(num_records), dtype=torch.float64, device=generator.device)
    rate = torch.tensor(float(sample_rate), dtype=torch.float64, device=generator.device)
    return int(torch.binomial(count, rate, generator=generator))


def _uniform_subset(num_records: int, size: int, generator: torch.Generator) -> Tensor:
    """Sorted indices of ``size`` distinct records, every such subset equally likely (see the
    module docstring)."""
    device = generator.device
    if size >= num_records * _PERMUTATION_SHARE:
        order = torch.randperm(num_records, generator=generator, device=device)
        return order[:size].sort().values
    chosen = torch.empty(0, dtype=torch.int64, device=device)
    while len(chosen) < size:
        missing = size - len(chosen)
        draws = torch.randint(num_records, (missing,), generator=generator, device=device)
        chosen = torch.unique(torch.cat([chosen, draws]))  # sorted, distinct
    return chosen


def poisson_sample(num_records: int, *, sample_rate: float, generator: torch.Generator) -> Tensor:
    """Indices of a Poisson sample: each of ``num_records`` records is included independently with
    probability ``sample_rate``.

    This is the sampling assumed by the subsampled-Gaussian privacy accounting (see the module
    docstring); the number of included records is Binomial(num_records, sample_rate) and can be 0.
    Drawn as that count and a uniform subset of that size: O(num_records x sample_rate) expected
    time and memory, not O(num_records).

    Returns a sorted int64 tensor of distinct indices in ``[0, num_records)`` on the generator's
    device. Raises ``ValueError`` unless ``0 < sample_rate <= 1`` (a programming error: user-facing
    rates are validated where they are configured).
    """
    _check_count(num_records)
    _check_generator(generator)
    rate = float(sample_rate)
    if not (math.isfinite(rate) and 0.0 < rate <= 1.0):
        raise ValueError(f"sample_rate must be in (0, 1], got {sample_rate!r}")
    if rate == 1.0:  # every record, without a draw
        return torch.arange(num_records, device=generator.device)
    size = binomial_count(num_records, sample_rate=rate, generator=generator)
    return _uniform_subset(num_records, size, generator)


def sample_without_replacement(
    num_records: int, *, size: int, generator: torch.Generator
) -> Tensor:
    """Sorted int64 indices of ``min(size, num_records)`` distinct records chosen uniformly at
    random.

    For NON-PRIVATE baselines only (DM, DC/DSA): a fixed-size sample does not match the Poisson
    sampling assumed by the privacy accounting.
    """
    _check_count(num_records)
    _check_generator(generator)
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ValueError(f"size must be a non-negative int, got {size!r}")
    return _uniform_subset(num_records, min(size, num_records), generator)
