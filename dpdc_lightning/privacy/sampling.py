"""Record sampling: Poisson subsampling for private steps, fixed-size sampling for baselines.

PRIVACY-CRITICAL. The privacy accountant (Opacus' RDP / PRV accountants) analyses each step as the
*Poisson-subsampled* Gaussian mechanism (Abadi et al. 2016, "Deep Learning with Differential
Privacy"; Mironov, Talwar & Zhang 2019, "Renyi Differential Privacy of the Sampled Gaussian
Mechanism"): every record is included independently with probability q, so the batch size itself
is random (Binomial(N, q)) and may be zero. Its privacy amplification ("q" in the accounting) holds
only for that sampling. A fixed-size sample, shuffled epochs or sampling with replacement do NOT
match the accounting; use ``sample_without_replacement`` only in non-private baselines.

Every draw uses the caller's ``torch.Generator`` (never torch's global RNG), so a step's sample
depends only on the generator the caller derived for it (e.g. from (seed, "poisson", step, class)).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def _check_count(num_records: int) -> int:
    if isinstance(num_records, bool) or not isinstance(num_records, int) or num_records < 0:
        raise ValueError(f"num_records must be a non-negative int, got {num_records!r}")
    return num_records


def _check_generator(generator: torch.Generator) -> None:
    if not isinstance(generator, torch.Generator):
        raise ValueError(f"generator must be a torch.Generator, got {type(generator).__name__}")


def poisson_sample(num_records: int, *, sample_rate: float, generator: torch.Generator) -> Tensor:
    """Indices of a Poisson sample: each of ``num_records`` records is included independently with
    probability ``sample_rate``.

    This is the sampling assumed by the subsampled-Gaussian privacy accounting (see the module
    docstring); the number of included records is Binomial(num_records, sample_rate) and can be 0.

    Returns a sorted int64 tensor of distinct indices in ``[0, num_records)`` on the generator's
    device. Raises ``ValueError`` unless ``0 < sample_rate <= 1`` (a programming error: user-facing
    rates are validated where they are configured).
    """
    _check_count(num_records)
    _check_generator(generator)
    rate = float(sample_rate)
    if not (math.isfinite(rate) and 0.0 < rate <= 1.0):
        raise ValueError(f"sample_rate must be in (0, 1], got {sample_rate!r}")
    # One uniform per record, compared against q: independent Bernoulli(q) inclusions.
    # torch.rand is in [0, 1), so q = 1 includes every record.
    uniforms = torch.rand(num_records, generator=generator, device=generator.device)
    return torch.nonzero(uniforms < rate, as_tuple=False).flatten()


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
    order = torch.randperm(num_records, generator=generator, device=generator.device)
    return order[: min(size, num_records)].sort().values
