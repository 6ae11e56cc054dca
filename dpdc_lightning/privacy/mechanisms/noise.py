"""Where the Gaussian noise of the mechanisms comes from: a keyed cryptographic stream by default.

PRIVACY-CRITICAL. The RDP/PRV accountants analyse an exact, untruncated Gaussian. A floating-point
sampler only approximates it, and the approximation can leak (Mironov 2012, "On Significance of the
Least Significant Bits for Differential Privacy"): ``torch.randn`` in float32 on a CPU builds each
variate from 24-bit uniforms, so every draw satisfies |z| <= sqrt(48 ln 2) ~ 5.77 and the noise has
a visible grid; its Mersenne-Twister generator is predictable from its outputs. Opacus' secure mode
answers with torchcsprng and a sum of several draws; this module needs neither.

:class:`KeyedNoise` (default, ``privacy.reproducible_noise=false``):

- **Bytes.** SHAKE-256 (NIST FIPS 202), an extendable-output function, absorbs an unambiguous
  encoding of (domain, run secret, phase, step, partition, draw index) and squeezes as many bytes as
  the draw needs. A secret-prefixed SHAKE is a keyed pseudo-random function (the construction KMAC,
  NIST SP 800-185, standardises); without the secret the bytes are unpredictable, and seeing some
  outputs reveals nothing about the others. The key is the *purpose* of the draw, not a position in
  a stateful generator, so a resumed run and a run sharded over any number of DDP processes redraw
  exactly the same noise for a repeated (step, partition).
- **Uniforms.** Each 8 bytes (little-endian) give 53 bits k, and u = (k + 1) 2^-53 in (0, 1]: every
  multiple of 2^-53 in (0, 1] equally likely, exact in float64. The radius of Box-Muller, where the
  tail lives, takes two words instead: K = k1 2^53 + k2 (106 bits) and u = (K + 1) 2^-106 rounded
  once to float64, so u reaches down to 2^-106 with float64's full relative precision.
- **Normals.** Box-Muller in float64 (Box & Muller 1958): radius sqrt(-2 ln u1), angle 2 pi u2.
  Since u1 >= 2^-106, every pair has radius <= R = sqrt(212 ln 2) ~ 12.12, hence |z| <= 12.12 (with
  53-bit radius uniforms R would be sqrt(106 ln 2) ~ 8.57; float32 ``torch.randn`` has 5.77).
  R is exactly the 1 - 2^-106 quantile of an ideal Gaussian pair's radius (P(r > R) = exp(-R^2/2) =
  2^-106 ~ 1.2e-32): the sampler is the ideal Gaussian conditioned on r <= R, at total-variation
  distance <= 2^-106 per pair, <= n 2^-106 for n values drawn in a run (:func:`truncation`). What
  it adds to delta, (1 + e^epsilon) n 2^-106 (see :func:`describe`), is ~6e-22 at the NDPDC
  default (n = 10000 steps x 10 classes x 2048 = 2e8, epsilon 5.44) and below 1e-12 for any run of
  fewer than 10^11 values at epsilon <= 20: nothing next to delta. 53-bit radius uniforms would not
  do: at the NDPDC default (1 + e^eps) n 2^-53 ~ 5e-6, half of delta = 1e-5.
- The mechanisms add the float64 noise to the float64 clipped sum and cast once: the float32
  release is rounded from an exact-to-1e-16 sum, never the sum of two float32 roundings.

:class:`SeededNoise` (``privacy.reproducible_noise=true``): float64 ``torch.randn`` from a
Mersenne-Twister generator seeded from the PUBLIC run seed. Fast and repeatable for tests and
comparisons; NOT private, and the report says so.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from dpdc_lightning.seeding import derive_generator

UNIFORM_BITS = (
    53  # float64's significand: the finest uniform grid that float64 holds exactly on (0, 1]
)
RADIUS_BITS = 2 * UNIFORM_BITS  # the radius uniform: two words, smallest value 2^-106
TRUNCATION_RADIUS = math.sqrt(
    2 * RADIUS_BITS * math.log(2)
)  # sqrt(212 ln 2) ~ 12.12: the largest radius
PAIR_TAIL_MASS = 2.0**-RADIUS_BITS  # P(ideal Gaussian pair radius > TRUNCATION_RADIUS), exactly
FLOAT32_RANDN_BOUND = math.sqrt(
    2 * 24 * math.log(2)
)  # the bound of the old float32 sampler, for comparison
_DOMAIN = (
    b"dpdc_lightning/privacy-noise/v1"  # separates these bytes from any other use of the secret
)


def _field(data: bytes) -> bytes:
    # Length-prefixed fields: no two different keys encode to the same bytes
    # (e.g. ("ab", 1) vs ("a", "b1")).
    return len(data).to_bytes(8, "little") + data


def _int_field(value: int) -> bytes:
    value = int(value)
    return _field(value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True))


class NoiseStream:
    """A source of i.i.d. N(0, 1) float64 variates for ONE (phase, step, partition).

    Successive calls of :meth:`standard_normal` return fresh variates (draw 0, 1, ...); a new
    stream with the same key repeats them. Values come back on the CPU: the mechanisms add them in
    float64 there, independent of the device the method runs on.
    """

    secure: ClassVar[bool]
    key: int | None = (
        None  # the seed it is keyed by (privacy/mechanisms/noise_scope.py compares it)
    )

    def __init__(self) -> None:
        self.values_drawn = 0

    def standard_normal(self, shape: tuple[int, ...]) -> Tensor:
        shape = tuple(int(s) for s in shape)
        if any(s < 0 for s in shape):
            raise ValueError(f"a noise shape needs non-negative sizes, got {shape}")
        values = self._draw(math.prod(shape)).reshape(shape)
        self.values_drawn += values.numel()
        return values

    def _draw(self, count: int) -> Tensor:
        raise NotImplementedError


class KeyedNoise(NoiseStream):
    """Cryptographically secure Gaussian noise keyed by the run's secret (see the module
    docstring)."""

    secure = True

    def __init__(self, secret: int, *, phase: str, step: int, partition: int) -> None:
        super().__init__()
        if int(secret) < 0:
            raise ValueError("the noise secret must be a non-negative integer")
        self.key = int(secret)
        self._prefix = b"".join(
            [
                _field(_DOMAIN),
                _int_field(secret),
                _field(str(phase).encode()),
                _int_field(step),
                _int_field(partition),
            ]
        )
        self._draws = 0

    def _bytes(self, count: int) -> bytes:
        # A fresh XOF per draw, keyed by its index: draws never share bytes and need no stored
        # state.
        xof = hashlib.shake_256(self._prefix + _int_field(self._draws))
        self._draws += 1
        return xof.digest(count)

    def _words(self, count: int) -> np.ndarray:
        """``count`` 53-bit integers k (as float64, exact) from one draw of the stream."""
        words = np.frombuffer(self._bytes(8 * count), dtype="<u8")
        return (words >> np.uint64(64 - UNIFORM_BITS)).astype(np.float64)  # the top 53 bits

    def uniforms(self, count: int) -> Tensor:
        """``count`` float64 uniforms on (0, 1], each a multiple of 2^-53 (one draw of the
        stream)."""
        # k + 1 <= 2^53 and the scaling by 2^-53 are exact in float64.
        return torch.from_numpy((self._words(count) + 1.0) * 2.0**-UNIFORM_BITS)

    def _draw(self, count: int) -> Tensor:
        pairs = (count + 1) // 2
        k = self._words(3 * pairs)  # one draw: (k1, k2) of each radius, then the angles
        high, low, angle_k = k[:pairs], k[pairs : 2 * pairs], k[2 * pairs :]
        # u1 = (k1 2^53 + k2 + 1) 2^-106: both terms exact in float64, their sum rounded once.
        u1 = torch.from_numpy(high * 2.0**-UNIFORM_BITS + (low + 1.0) * 2.0**-RADIUS_BITS)
        u2 = torch.from_numpy((angle_k + 1.0) * 2.0**-UNIFORM_BITS)
        radius = torch.sqrt(-2.0 * torch.log(u1))  # <= TRUNCATION_RADIUS since u1 >= 2^-106
        angle = (2.0 * math.pi) * u2
        return torch.cat([radius * torch.cos(angle), radius * torch.sin(angle)])[:count]


class SeededNoise(NoiseStream):
    """float64 ``torch.randn`` from a generator seeded by (seed, phase, step, partition): NOT
    private."""

    secure = False

    def __init__(self, seed: int, *, phase: str, step: int, partition: int) -> None:
        super().__init__()
        self.key = int(seed)
        self._generator = derive_generator(seed, "noise", phase, step, partition)

    def _draw(self, count: int) -> Tensor:
        return torch.randn(count, generator=self._generator, dtype=torch.float64)


def noise_source(
    seed: int, *, phase: str, step: int, partition: int, reproducible: bool
) -> NoiseStream:
    """The noise stream of one (phase, step, partition): keyed by the run's secret ``seed``, or,
    with ``reproducible=True``, a seeded torch generator (the seed is then public: not private)."""
    cls = SeededNoise if reproducible else KeyedNoise
    return cls(seed, phase=phase, step=step, partition=partition)


def truncation(values_drawn: int) -> float:
    """Total-variation distance bound between the noise of a run that drew ``values_drawn`` secure
    normal values and ideal Gaussian noise: one 2^-106 per Box-Muller pair, ceil(n/2) <= n pairs."""
    return float(values_drawn) * PAIR_TAIL_MASS


def describe(
    *, reproducible: bool, values_drawn: int | None, epsilon: float | None, delta: float | None
) -> dict[str, Any]:
    """The report's account of the noise: generator, conversion, truncation and what it costs.

    A mechanism at total-variation distance eta from one that is (epsilon, delta)-DP is
    (epsilon, delta + (1 + e^epsilon) eta)-DP: P(S) <= Q(S) + eta <= e^eps (Q'(S)) + delta + eta
    <= e^eps (P'(S) + eta) + delta + eta. ``delta_with_truncation`` is that bound for this run.
    """
    if reproducible:
        return {
            "generator": "torch.Generator (Mersenne Twister) seeded from the PUBLIC run seed; "
            "NOT private",
            "conversion": "torch.randn in float64 on the CPU, added to the float64 "
            "clipped sum, cast to float32 once",
        }
    summary: dict[str, Any] = {
        "generator": "SHAKE-256 keyed by the run's OS-entropy secret and "
        "(phase, step, partition, draw)",
        "conversion": "Box-Muller in float64 on a 106-bit radius uniform and a 53-bit angle "
        "uniform, added to the float64 clipped sum, cast to float32 once",
        "truncation_bound_std": TRUNCATION_RADIUS,
        "tail_mass_per_pair": PAIR_TAIL_MASS,
        "tail_mass_per_value": math.erfc(TRUNCATION_RADIUS / math.sqrt(2.0)),
    }
    if values_drawn is not None:
        eta = truncation(values_drawn)
        summary.update({"noise_values": int(values_drawn), "truncation_tv_bound": eta})
        if epsilon is not None and delta is not None:
            summary["delta_with_truncation"] = delta + (1.0 + math.exp(min(epsilon, 700.0))) * eta
    return summary
