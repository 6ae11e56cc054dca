"""The Gaussian mechanism on clipped sums: the only code that noises private values.

Every private query of the package is a *Poisson-subsampled Gaussian mechanism* (Abadi et al.
2016, "Deep Learning with Differential Privacy"): a record joins the batch independently with
probability ``sample_rate``, each record's contribution (a row) is clipped to L2 norm
``max_norm``, the clipped rows are summed, and Gaussian noise of standard deviation
``sensitivity * noise_multiplier`` is added to the sum.

Neighbouring relation: add/remove one record. Adding or removing one record changes a sum of
rows clipped to ``G`` by exactly that record's clipped row, whose norm is at most ``G``; so the
L2 sensitivity of the sum is ``G`` and the noise multiplier (noise std / sensitivity) is the
``sigma`` that the RDP analysis of the sampled Gaussian mechanism (Mironov, Talwar & Zhang 2019)
takes. This is the mechanism of Zheng & Li, "Differentially Private Dataset Condensation":
Thm 3.1 (LDPDC: rows are images in [-b, b]^d, sensitivity b*sqrt(d), noise multiplier
sigma / (b*sqrt(d))) and Thm 3.2 (NDPDC: rows are representations clipped to G, noise
multiplier sigma / G). When every class runs one such query per step on its own disjoint
part of the data, the step costs one mechanism at ``q = max_c q_c`` (their Cor. A.1, parallel
composition), which is the ``sample_rate`` the caller reports.

Each call returns a :class:`PrivacyEvent` that the caller hands to the accountant; this module
never imports the accountant (the mechanism/accountant separation of Opacus). Methods never draw
noise themselves: they call these functions with the :class:`~.noise.NoiseStream` of the step and
partition (``CondensationMethod.noise_stream``); :mod:`.noise` says where the noise comes from,
why it is float64 and how far it is from an exact Gaussian.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from dpdc_lightning.errors import UserError
from dpdc_lightning.privacy.mechanisms.noise import NoiseStream
from dpdc_lightning.privacy.mechanisms.noise_scope import issued, refuse_foreign_noise


def _positive_finite(value: float, *, name: str) -> float:
    value = float(value)
    if not (math.isfinite(value) and value > 0):
        raise UserError(f"{name} must be a finite number > 0, got {value!r}")
    return value


@dataclass(frozen=True)
class PrivacyEvent:
    """One run of the Poisson-subsampled Gaussian mechanism: what the accountant needs
    (``noise_multiplier`` = noise std / L2 sensitivity > 0; ``sample_rate`` = Poisson inclusion
    probability of one record, 0 < q <= 1, q = 1 the whole data set) and what the report states
    about it, filled in by the mechanism that spent it: a description, the L2 ``sensitivity``, and
    the public ``expected_size`` the noisy sum was divided by (None for a sum). ``noise_std`` is
    derived, so the report can never state a std the mechanism did not draw.
    """

    noise_multiplier: float
    sample_rate: float
    # Equal events cost the same: the description does not enter the comparison.
    mechanism: str = dataclasses.field(default="Gaussian mechanism", compare=False)
    sensitivity: float | None = dataclasses.field(default=None, compare=False)
    expected_size: float | None = dataclasses.field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self,
            "noise_multiplier",
            _positive_finite(self.noise_multiplier, name="noise_multiplier"),
        )
        sample_rate = float(self.sample_rate)
        if not (0.0 < sample_rate <= 1.0):
            raise UserError(f"sample_rate must be in (0, 1], got {sample_rate!r}")
        object.__setattr__(self, "sample_rate", sample_rate)
        if self.sensitivity is not None:
            object.__setattr__(
                self, "sensitivity", _positive_finite(self.sensitivity, name="sensitivity")
            )

    @property
    def noise_std(self) -> float | None:
        return None if self.sensitivity is None else self.noise_multiplier * self.sensitivity

    def to_dict(self) -> dict[str, Any]:
        """Plain types (plan.json, checkpoints): every field."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> PrivacyEvent:
        return cls(**state)


def clip_rows(x: Tensor, *, max_norm: float, constant_factor: bool = False) -> Tensor:
    """Scale each row ``x[i]`` (flattened) to L2 norm ≤ ``max_norm``: ``x_i * min(1, G / ||x_i||)``.

    Rows already inside the ball are returned unchanged (the factor is exactly 1), zero rows
    stay zero with finite gradients, and the operation is differentiable: it is applied to
    synthetic representations that are optimised, as well as to private ones.
    ``constant_factor=True`` treats the factor as a constant for autograd (the DPDC authors' code
    detaches the synthetic norm); the values are identical, only gradients differ. It matters
    for synthetic rows only: private rows are never differentiated.
    """
    max_norm = _positive_finite(max_norm, name="max_norm")
    if x.dim() == 0:
        raise ValueError("clip_rows needs a tensor with a leading row dimension, got a scalar")
    # flatten(1), not reshape(n, -1): the latter is ambiguous for an empty batch.
    flat = x.flatten(1) if x.dim() > 1 else x.unsqueeze(1)
    # A NaN/Inf row has no norm to clip to, and one such row would make a sum NaN: refuse it. The
    # private paths never get here with one (noisy_clipped_sum and per_example zero such rows first
    # with finite_rows); what remains are synthetic rows, functions of released values only.
    if not bool(torch.isfinite(flat).all()):
        raise UserError(
            "clip_rows: an input row holds NaN or Inf values; the Gaussian mechanism refuses "
            "non-finite rows (its sensitivity bound does not hold for them)"
        )
    norms = torch.linalg.vector_norm(flat, dim=1)
    # clamp_min keeps G / 0 finite; the clamp at 1 then leaves zero (and short) rows as they are.
    if constant_factor:
        norms = norms.detach()
    factor = (max_norm / norms.clamp_min(torch.finfo(norms.dtype).tiny)).clamp(max=1.0)
    return x * factor.reshape((-1,) + (1,) * (x.dim() - 1))


NON_FINITE_ROWS = (
    "a sampled record whose row (pixels, features or gradient) holds NaN or Inf is replaced by a "
    "zero row before clipping: norm 0 <= the clip norm, so the sensitivity is unchanged and the "
    "run never stops for it; how many rows were replaced is not reported (an exact count would be "
    "a release of its own)"
)


def finite_rows(rows: Tensor) -> Tensor:
    """``rows`` (``[n, *shape]``) with every row that holds a NaN or Inf replaced by zeros.

    Privacy-critical: what the mechanisms do with a private row that has no norm to clip to.
    Refusing it would stop the run at the first step that samples it, so whether and when a run
    stops would depend on a private record and on the secret sample. A zero row adds nothing to the
    sum and has norm 0 <= any clip norm: the sensitivity bound holds as before. Nothing counts or
    reports the replaced rows (:data:`NON_FINITE_ROWS` is the report's fixed statement)."""
    flat = rows.flatten(1) if rows.dim() > 1 else rows.unsqueeze(1)
    finite = torch.isfinite(flat).all(dim=1).reshape((-1,) + (1,) * (rows.dim() - 1))
    return torch.where(finite, rows, torch.zeros((), dtype=rows.dtype, device=rows.device))


def gaussian_noise_like(value: Tensor, *, std: float, noise: NoiseStream) -> Tensor:
    """N(0, std^2 I) noise of ``value``'s shape as float64 on the CPU, from ``noise``.

    float64 on the CPU whatever ``value`` is: the caller adds it to the sum in float64 before any
    cast (see :mod:`.noise`), and the draw does not depend on the device the method runs on.
    """
    std = _positive_finite(std, name="noise std")
    if not isinstance(noise, NoiseStream):
        # A torch.Generator here would be the old float32 Mersenne-Twister path: refuse it loudly.
        raise TypeError(
            "noise must be a NoiseStream (privacy.mechanisms.noise.noise_source), "
            f"got {type(noise).__name__}"
        )
    refuse_foreign_noise(noise)  # inside a run's step: the run's own keyed stream only
    return noise.standard_normal(tuple(value.shape)) * std


def gaussian_sum(
    clipped_sum: Tensor,
    *,
    sensitivity: float,
    noise_multiplier: float,
    sample_rate: float,
    noise: NoiseStream,
    mechanism: str = "Gaussian sum",
    expected_size: float | None = None,
    reduce_sum: Callable[[Tensor], Tensor] | None = None,
) -> tuple[Tensor, PrivacyEvent]:
    """Release ``clipped_sum + N(0, (sensitivity * noise_multiplier)^2 I)`` and its event.

    ``clipped_sum`` must be a sum of per-record rows each of L2 norm <= ``sensitivity``: under
    add/remove-one its L2 sensitivity is then ``sensitivity``, and the noise std is
    ``sensitivity * noise_multiplier``. The event records the noise multiplier and the
    Poisson sample rate that produced the rows, with ``mechanism`` (what was summed) and the
    ``expected_size`` a caller divides the release by, for the report.

    The sum and the noise are added in float64 on the CPU and the release is cast to float32 (on
    ``clipped_sum``'s device) once, so its value is the exact sum rounded a single time; the
    float64 noise keeps its 53-bit resolution and its 8.57-std truncation (:mod:`.noise`).

    One sample sharded over processes: ``clipped_sum`` is this process's share (the shares are
    disjoint and together the sample) and ``reduce_sum`` sums over processes (an all-reduce). The
    shares are summed FIRST, in float64 on a copy (an all-reduce works in place), and the noise is
    added ONCE to the total from ``noise``, the run's keyed stream of this (step, partition): every
    process draws the same values and holds the same release. A record lies in one share, so the
    total's sensitivity is ``sensitivity``, as in one process. Noising each share before the sum
    would add one draw per process: W independent draws carry W times the variance the accountant
    assumed, W copies of one draw W² times.
    """
    event = PrivacyEvent(
        noise_multiplier=noise_multiplier,
        sample_rate=sample_rate,
        mechanism=mechanism,
        sensitivity=sensitivity,
        expected_size=expected_size,
    )
    if reduce_sum is not None:
        clipped_sum = reduce_sum(clipped_sum.to(torch.float64).clone())
    values = gaussian_noise_like(clipped_sum, std=event.noise_std, noise=noise)
    # The device meets the noise here: the sum comes to the CPU (a GPU sum: one device-to-host copy,
    # which waits for the values), the float64 total is rounded to float32 ONCE, on the CPU, and the
    # float32 release goes back without blocking (the host tensor is fresh; CUDA stages it at once).
    released = (clipped_sum.to(device="cpu", dtype=torch.float64) + values).to(torch.float32)
    issued(event)  # inside a run's step: the one event the run may spend for this release
    return released.to(clipped_sum.device, non_blocking=True), event


def noisy_clipped_sum(
    rows: Tensor,
    *,
    max_norm: float,
    noise_multiplier: float,
    sample_rate: float,
    noise: NoiseStream,
    rows_are: str = "rows",
    expected_size: float | None = None,
) -> tuple[Tensor, PrivacyEvent]:
    """Clip each row of ``rows`` (shape ``[n, *shape]``) to ``max_norm``, sum, add Gaussian noise.

    Sensitivity ``max_norm`` (one clipped row), noise std ``max_norm * noise_multiplier``. A row
    holding NaN or Inf counts as a zero row (:func:`finite_rows`). An
    empty Poisson sample (``n = 0``, shape ``[0, *shape]``) is a valid input: its sum is zeros of
    ``shape`` and the output is pure noise, as the mechanism requires. The release is float32 on
    ``rows``' device. ``rows_are`` names what the rows are, for the event's description.
    """
    if rows.dim() == 0:
        raise ValueError("noisy_clipped_sum needs rows of shape [n, *shape], got a scalar")
    # A NaN/Inf row becomes a zero row (finite_rows), never an error. Clip and sum in float64 on the
    # CPU: float32 rounding could leave a clipped row a few ulps above max_norm and the sum off by
    # ~1e-7 relative; in float64 both errors are ~1e-16.
    clipped = clip_rows(finite_rows(rows.to(device="cpu", dtype=torch.float64)), max_norm=max_norm)
    released, event = gaussian_sum(
        clipped.sum(dim=0),
        sensitivity=max_norm,
        noise_multiplier=noise_multiplier,
        sample_rate=sample_rate,
        noise=noise,
        mechanism=f"Poisson-subsampled Gaussian sum of {rows_are} clipped to L2 norm {max_norm:g}",
        expected_size=expected_size,
    )
    return released.to(rows.device, non_blocking=True), event


def noisy_clipped_mean(
    rows: Tensor,
    *,
    max_norm: float,
    noise_multiplier: float,
    sample_rate: float,
    expected_size: float,
    noise: NoiseStream,
    rows_are: str = "rows",
) -> tuple[Tensor, PrivacyEvent]:
    """The noisy clipped sum divided by the public EXPECTED sample size (e.g. L = q * N).

    Dividing by the realised size ``n`` would make the output's scale depend on the private
    sample, outside what the sum's sensitivity covers; the expected size is a public constant,
    so division is post-processing and the privacy event is that of the sum.
    """
    expected_size = _positive_finite(expected_size, name="expected_size")
    noisy_sum, event = noisy_clipped_sum(
        rows,
        max_norm=max_norm,
        noise_multiplier=noise_multiplier,
        sample_rate=sample_rate,
        noise=noise,
        rows_are=rows_are,
        expected_size=expected_size,
    )
    return noisy_sum / expected_size, event
